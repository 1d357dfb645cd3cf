"""What the fit check (memory_plan/fits.py) costs before a run starts, per kind of run: the
bound alone (a run that fits with room to spare — every normal start), and the planner (a run
near or over the device), in one process after a warm-up, median of 5:

    python -m benchmarks.fit_check

It also prints which stage decided, so a row that should be decided by the bound and is not
shows at once. The planner's first use in a process also pays torch's import (the CLI imports
torch anyway, right after, to ask for the device).
"""

from __future__ import annotations

import importlib
import statistics
import time

from parallel_wan.config import ConfigError
from parallel_wan.config.compose import compose_settings
from parallel_wan.memory_plan.cli import planning_spec

CASES = [
    ("tiny default (17×128×128), 24 GB host", [], 24e9),
    ("tiny 401×512×512, 24 GB host", ["num_frames=401", "height=512", "width=512"], 24e9),
    ("A14B 720p dp2_cp4 sharded, 80 GB GPUs", ["model=wan2.2_t2v_a14b", "mesh=dp2_cp4", "memory=sharded"], 80e9),
    ("A14B 720p one 141 GB H200", ["model=wan2.2_t2v_a14b"], 141e9),
    ("A14B 720p one 80 GB GPU (does not fit)", ["model=wan2.2_t2v_a14b"], 80e9),
    ("tiny 4001×1024×1024, 24 GB host (does not fit)", ["num_frames=4001", "height=1024", "width=1024"], 24e9),
    ("tiny 17×16384×16384, 24 GB host (does not fit)", ["height=16384", "width=16384"], 24e9),
]


def main() -> None:
    fits = importlib.import_module("parallel_wan.memory_plan.fits")
    report = importlib.import_module("parallel_wan.memory_plan.report")
    planned = report.plan
    calls = []

    def counting(spec):
        calls.append(1)
        return planned(spec)

    report.plan = counting
    print(f"load average {open('/proc/loadavg').read().split()[:3]}")
    print("| run | decided by | check (median of 5) |")
    print("|---|---|---|")
    for name, overrides, budget in CASES:
        raw = {**compose_settings(overrides), "output_dir": "unused"}
        mesh = raw["mesh"]
        spec = planning_spec(raw, int(mesh.get("dp") or 1) * int(mesh.get("cp") or 1))
        times, verdict = [], "fits"
        for _ in range(6):  # the first is a warm-up (imports)
            calls.clear()
            t0 = time.perf_counter()
            try:
                fits.check_fits(spec, budget=budget)
            except ConfigError:
                verdict = "refused"
            times.append(time.perf_counter() - t0)
        stage = "the planner" if calls else "the bound"
        print(f"| {name} | {stage}: {verdict} | {statistics.median(times[1:]) * 1e3:.2f} ms |", flush=True)
    report.plan = planned


if __name__ == "__main__":
    main()
