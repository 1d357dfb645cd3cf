"""The denoising loop's state between two steps, and its files.

A `LoopState` is everything the next step needs from the steps before it: how many steps are
done, the latents, the sampler's state (sampling/sampler.py) and a dict for the per-step cache
state of features that skip or reuse work. The loop (denoise.py) can start from any state and
stop after any step, so a generation stopped after step k and resumed from its saved state gives
the latents of an uninterrupted run, bit for bit.

On disk a state is two files next to each other: `<stem>.safetensors` with the arrays and
`<stem>.json` with the step, the layout of the arrays and the caller's metadata (never a
pickle). Each is written under a temporary name and renamed; the JSON goes last and names a
token the safetensors file carries too, so a reader never pairs arrays and scalars from two
different saves. Under torchrun every rank holds its own shard and saves its own pair
(`rank_stem`); a single controller (JAX) saves the global arrays once, from the host.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from ..report.outputs import write_atomic, write_json

FORMAT = 1


@dataclass
class LoopState:
    step: int  # steps done: the index of the next step to run
    latents: Any  # the backend's array: a rank's shard (torch) or the global array (JAX)
    sampler: dict[str, Any]  # the sampler's named arrays, None until a step fills them
    cache: dict[str, Any] = field(default_factory=dict)  # per-step cache state: named arrays

    @classmethod
    def begin(cls, latents, sampler, step: int = 0) -> LoopState:
        """Before step `step` (0; video-to-video: later) of `sampler`'s schedule, from the initial latents."""
        return cls(step, latents, sampler.initial_state(), {})

    def map(self, fn: Callable) -> LoopState:
        """The same state with `fn` applied to every array (to the host, to a device, a copy)."""

        def each(d):
            return {k: None if v is None else fn(v) for k, v in d.items()}

        return replace(self, latents=fn(self.latents), sampler=each(self.sampler), cache=each(self.cache))


def rank_stem(directory: str | Path, rank: int = 0) -> Path:
    """Where rank `rank` keeps its state in `directory`: state.rank{rank}.{safetensors,json}."""
    return Path(directory) / f"state.rank{rank}"


def save_loop_state(
    stem: str | Path, state: LoopState, meta: dict | None = None, to_host: Callable = np.asarray
) -> None:
    """Write `state` as `<stem>.safetensors` + `<stem>.json`; `meta` (JSON values) rides along.

    `to_host` makes a host numpy array of each array; the default takes host arrays, CPU
    tensors and JAX arrays this process holds whole. Pass `backend.to_host` for device tensors
    or a JAX array sharded over several hosts (it gathers them first). Arrays already on the
    host (a step cache's logs, which stay there) are written as they are.
    """
    stem = Path(stem)
    host = state.map(lambda a: np.ascontiguousarray(a if isinstance(a, np.ndarray) else to_host(a)))
    arrays = {"latents": host.latents}
    for group in ("sampler", "cache"):
        arrays.update({f"{group}/{k}": v for k, v in getattr(host, group).items() if v is not None})
    token = uuid.uuid4().hex
    record = {
        "format": FORMAT,
        "token": token,
        "step": int(state.step),
        # None entries have no array; the names keep the dicts' keys and order.
        "sampler": list(state.sampler),
        "cache": list(state.cache),
        "meta": meta or {},
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    # each file written under a temporary name and renamed: a reader sees the old file or the new one
    write_atomic(str(_file(stem, ".safetensors")), lambda tmp: save_file(arrays, tmp, metadata={"token": token}))
    write_json(_file(stem, ".json"), record, indent=1)


def load_loop_state(stem: str | Path) -> tuple[LoopState, dict]:
    """(the state with host numpy arrays, the metadata) saved at `stem`. Place the arrays with
    `state.map(...)` (e.g. `backend.to_device`) before resuming."""
    stem = Path(stem)
    record = json.loads(_file(stem, ".json").read_text())
    if record.get("format") != FORMAT:
        raise ValueError(f"{stem}.json has loop-state format {record.get('format')!r}; this version reads {FORMAT}")
    tensors = _file(stem, ".safetensors")
    token = _stored_token(tensors)
    if token != record["token"]:
        raise ValueError(
            f"{tensors} (token {token}) is not the file {stem}.json was saved with "
            f"(token {record['token']}): the two files come from different saves"
        )
    arrays = load_file(str(tensors))

    def group(name):
        return {k: arrays.get(f"{name}/{k}") for k in record[name]}

    return LoopState(record["step"], arrays["latents"], group("sampler"), group("cache")), record["meta"]


def _file(stem: Path, suffix: str) -> Path:
    # Not with_suffix: "state.rank0" would lose its ".rank0".
    return stem.with_name(stem.name + suffix)


def _stored_token(path: Path) -> str | None:
    with safe_open(str(path), "np") as f:
        return (f.metadata() or {}).get("token")
