"""A single run's default output folder, outputs/<date>_<time>, claimed for this run alone.

The name has one-second resolution, so two runs started in the same second (a seed sweep of
concurrent commands, an array of jobs) compose the same name. Each run therefore creates its
folder with an exclusive mkdir — the file system decides who was first — and takes the next
free `-2`, `-3`, … suffix when the name is taken, never writing into another run's folder.
Only the process that writes outputs claims; under torchrun its choice is broadcast.

The claim is made after every check passed and before the model loads; a run that then fails
with nothing written removes its still-empty folder again (nothing half-written on disk).
"""

from __future__ import annotations

import os

MAX_SUFFIX = 10_000


def claim_folder(path: str) -> str:
    """Create `path` — or, when it exists, the first of `path-2`, `path-3`, … that does not —
    and return the one this call created. Raises OSError when none can be created."""
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        os.makedirs(parent, exist_ok=True)
        _made_parents.add(os.path.abspath(parent))
    for number in range(1, MAX_SUFFIX + 1):
        candidate = path if number == 1 else f"{path}-{number}"
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        return candidate
    raise OSError(f"output folders {path} … {path}-{MAX_SUFFIX} all exist; set output_dir=DIR")


def release_if_empty(path: str) -> None:
    """Remove a claimed folder the run left empty (it failed or was stopped before writing),
    and the `outputs/` above it when the claim made that and it is empty now."""
    for folder in (path, os.path.dirname(os.path.abspath(path))):
        if folder != path and folder not in _made_parents:
            break
        try:
            os.rmdir(folder)  # refuses a folder that holds anything: what was written stays
        except OSError:
            break


_made_parents: set[str] = set()  # parents claim_folder created in this process
