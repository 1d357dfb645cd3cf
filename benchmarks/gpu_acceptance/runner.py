"""Time-boxed phases whose results reach disk as each one ends.

A lent GPU is rare and brief, so one hung CUDA call or one slow compile must not cost the
figures of the phases after it: each phase has its own budget and (by default) runs in a
spawned child process that is killed when the budget is spent. The child writes what it has
measured so far to its own JSON file as it goes (`Phase.record`), so even a phase that times
out keeps its finished parts; the parent folds that file into DIR/acceptance.json, which is
rewritten atomically (temp file + rename) after every phase, so a run cut off at any point
leaves a valid JSON of everything measured before it.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path


def write_json(path: Path, data) -> None:
    """Atomically: readers (and a run cut off mid-write) see the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


@dataclasses.dataclass
class Phase:
    """What a phase function gets: where it runs and a place to put figures as they come."""

    name: str
    out: Path
    dry_run: bool
    device: str
    results: dict = dataclasses.field(default_factory=dict)
    earlier: dict = dataclasses.field(default_factory=dict)  # finished phases' results, by name
    budget_s: float | None = None  # the seconds it has before it is killed (a phase may plan with them)

    @property
    def file(self) -> Path:
        return self.out / f"phase_{self.name}.json"

    def record(self, key: str, value) -> None:
        self.results[key] = value
        write_json(self.file, self.results)


@dataclasses.dataclass(frozen=True)
class Step:
    """A phase: `target` is "module:function" (importable in a spawned child), `budget_s` its
    share of a 20-minute run."""

    name: str
    target: str
    budget_s: float


def _call(target: str, phase: Phase) -> None:
    module, func = target.split(":")
    getattr(importlib.import_module(module), func)(phase)


def _child(target: str, phase: Phase) -> None:
    try:
        _call(target, phase)
        phase.record("status", "ok")
    except BaseException as exc:  # a phase's failure is a finding, written down
        phase.record("status", "failed")
        phase.record("error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
        phase.record("traceback", traceback.format_exc()[-2000:])
        if isinstance(exc, KeyboardInterrupt):
            raise


def _read(phase: Phase) -> dict:
    try:
        return json.loads(phase.file.read_text())
    except (OSError, ValueError):
        return {}


def earlier_run(path: Path, dry_run: bool, device: str) -> dict | None:
    """The acceptance.json an earlier run on the same device left in DIR: its phases are kept,
    and those run again replace theirs, so a GPU lent in short slices can be measured in
    several calls (`--phases`) into one folder. Another device's (or a dry run's) is replaced."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if doc.get("dry_run") == dry_run and doc.get("device") == device else None


def run_phases(
    steps: list[Step],
    out: Path,
    *,
    dry_run: bool,
    device: str,
    budget_s: float,
    children=None,
    report: Callable[[dict], None] | None = None,
    clock=time.monotonic,
) -> dict:
    """Run `steps` in order, each within its budget (its own share, plus what earlier phases
    left unused beyond the later phases' shares, never past the total); `children`: the phase
    names run in a child process (None: all). Returns the acceptance dict, also on disk."""
    out.mkdir(parents=True, exist_ok=True)
    doc = earlier_run(out / "acceptance.json", dry_run, device) or {"dry_run": dry_run, "device": device, "phases": {}}
    doc["budget_s"] = budget_s
    start = clock()
    for i, step in enumerate(steps):
        left = budget_s - (clock() - start)
        later = sum(s.budget_s for s in steps[i + 1 :])
        limit = min(left, max(step.budget_s, left - later))
        phase = Phase(
            step.name,
            out,
            dry_run,
            device,
            earlier={k: v for k, v in doc["phases"].items() if v.get("status") == "ok"},
            budget_s=limit,
        )
        phase.file.unlink(missing_ok=True)
        t0 = clock()
        if limit < 1:
            entry = {"status": "skipped", "error": f"the run's {budget_s:.0f} s budget was spent before it"}
        elif children is None or step.name in children:
            proc = multiprocessing.get_context("spawn").Process(target=_child, args=(step.target, phase))
            proc.start()
            proc.join(limit)
            if proc.is_alive():
                proc.kill()
                proc.join()
                entry = {
                    **_read(phase),
                    "status": "timed out",
                    "error": f"killed after its budget of {limit:.0f} s; the figures above were measured before",
                }
            else:
                entry = _read(phase) or {"status": "failed", "error": f"the child exited with {proc.exitcode}"}
        else:
            _child(step.target, phase)  # in-process: cannot be killed, so only where nothing can hang (tests)
            entry = _read(phase)
        entry.update(budget_s=round(limit, 1), seconds=round(clock() - t0, 2))
        if step.name == "environment" and entry.get("gpu") != doc["phases"].get("environment", {}).get("gpu"):
            # another GPU than the earlier run's: its figures do not belong with these
            doc["phases"] = {s.name: doc["phases"][s.name] for s in steps[:i] if s.name in doc["phases"]}
        doc["phases"][step.name] = entry
        write_json(out / "acceptance.json", doc)
        phase.file.unlink(missing_ok=True)  # folded in: DIR keeps the one JSON
        if report:
            report({"name": step.name, **entry})
    return doc
