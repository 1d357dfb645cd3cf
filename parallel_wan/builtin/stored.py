"""The built-in tiny model written once per machine and read back by every later run.

Building it needs diffusers' model classes (2–3 s of imports, more than the tiny run itself),
and every process of a run used to build and write its own copy. Its checkpoint folder is now
kept under `<cache home>/builtin/<architecture>-<digest>`, where the digest covers everything
that decides its bytes: the architecture, the seed, the sources that build and write it, and
the versions of the libraries they call. A change to any of them is a new folder, never a
stale one.

The folder appears whole or not at all (written beside it, then renamed: two processes
writing at once both end with the same complete folder). The processes of one run (8 ranks
starting together on a fresh machine) take turns on a lock of the builtin/ folder itself, so
one builds and the others wait and read its folder instead of each building a copy. Where the cache home cannot be
written, the model is written to the run's temporary folder as before.

Cache home: $PARALLEL_WAN_CACHE_HOME, else $XDG_CACHE_HOME/parallel_wan, else ~/.cache/parallel_wan.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

SEED = 0
_PACKAGE = Path(__file__).resolve().parents[1]
# The code that decides the written bytes: the builder, the architectures, the configs it
# turns into diffusers' and the official layouts, the key maps.
_SOURCES = [
    "builtin/tiny.py",
    "builtin/kinds.py",
    "builtin/scheduler.py",
    "models/registry.py",
    "models/variants.py",
    "models/experts.py",
    "models/transformer_config.py",
    "models/vae_config.py",
    "models/s2v_config.py",
    "models/s2v_shapes.py",
    "models/transformer_shapes.py",
    "weights/t5_keymap.py",
    "weights/transformer_keymap.py",
    "weights/vae_keymap.py",
]
_LIBRARIES = ["torch", "diffusers", "transformers", "safetensors", "tokenizers"]


def cache_home() -> Path:
    explicit = os.environ.get("PARALLEL_WAN_CACHE_HOME")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "parallel_wan"


def digest(kind: str) -> str:
    """`kind`: a tiny kind (t2v, i2v, ti2v) or a built-in architecture's name (builtin/kinds.py)."""
    from parallel_wan.builtin.kinds import architecture

    arch = architecture(kind)
    h = hashlib.sha256()
    h.update(f"{arch.name} seed={SEED} {arch!r}".encode())
    for name in _SOURCES:
        h.update(name.encode() + (_PACKAGE / name).read_bytes())
    for library in _LIBRARIES:
        try:
            h.update(f"{library}=={metadata.version(library)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{library} absent".encode())
    return h.hexdigest()[:16]


def stored_folder(kind: str) -> Path:
    from parallel_wan.builtin.kinds import architecture

    return cache_home() / "builtin" / f"{architecture(kind).name}-{digest(kind)}"


def tiny_checkpoint_folder(kind: str, fallback: str | os.PathLike) -> Path:
    """The folder holding the built-in `kind` model as a diffusers-layout checkpoint: the stored
    one (written now if it is not there yet), or `fallback` written now when the cache home is
    not writable. Finding a stored folder imports no torch (the server's HTTP process does it)."""
    folder = stored_folder(kind)
    if folder.is_dir():
        return folder
    from parallel_wan.builtin.tiny import build_tiny, write_checkpoint

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with _turn(folder.parent):
            if folder.is_dir():  # built by the process that held the lock before this one
                return folder
            partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
            try:
                write_checkpoint(build_tiny(kind=kind, seed=SEED), partial, layout=layout_of(kind))
                os.rename(partial, folder)  # atomic; fails if another process got there first
            except OSError:
                if not folder.is_dir():
                    raise
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    except OSError:
        if folder.is_dir():
            return folder
        write_checkpoint(build_tiny(kind=kind, seed=SEED), fallback, layout=layout_of(kind))
        return Path(fallback)
    return folder


def stored_inputs(name: str, key: str, write) -> Path:
    """A folder of example inputs written once per machine by `write(folder)` under the cache
    home as `<name>-<key>` (as the built-in model is: atomically, one writer at a time); where the
    cache home cannot be written, this run's own copy in a temporary folder."""
    folder = cache_home() / "builtin" / f"{name}-{key}"
    try:
        if not folder.is_dir():
            folder.parent.mkdir(parents=True, exist_ok=True)
            with _turn(folder.parent):
                if not folder.is_dir():
                    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
                    try:
                        write(partial)
                        os.rename(partial, folder)
                    finally:
                        shutil.rmtree(partial, ignore_errors=True)
    except OSError:
        if not folder.is_dir():
            folder = Path(tempfile.mkdtemp(prefix=f"parallel_wan_{name}_"))
            write(folder)
    return folder


def layout_of(kind: str) -> str:
    """The layout the built-in model is stored in: diffusers', or the official one for a model
    diffusers has no pipeline for (S2V)."""
    from parallel_wan.builtin.kinds import architecture

    return "official" if architecture(kind).transformer.s2v is not None else "diffusers"


@contextlib.contextmanager
def _turn(directory: Path):
    """An exclusive flock on the directory itself (no lock file is left behind); where the
    file system has no flock, no lock: the rename above still keeps the folder whole."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # closing releases the lock
