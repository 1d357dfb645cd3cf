"""How close the job-time estimate (memory_plan/compute_time.py) is to what runs take here: for
a few tiny-model videos, the estimate (FLOPs over this CPU's measured matrix-multiply speed at
EFFICIENCY["cpu"]) against the run's own denoise + decode seconds from its sidecar, in one process
after another, on one machine:

    OMP_NUM_THREADS=2 python -m benchmarks.job_time

The tiny model is what a CPU can run; on a GPU the same comparison needs a lent device
(benchmarks/gpu_acceptance/ measures the GEMM peak and the A14B step there).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from parallel_wan.backends.device_facts import measure_device
from parallel_wan.config import resolve
from parallel_wan.config.compose import compose_settings
from parallel_wan.memory_plan.compute_time import duration, estimate_seconds, job_flops
from parallel_wan.memory_plan.fits import architecture_of

RUNS = [
    ["num_frames=161", "height=256", "width=256", "steps=2"],
    ["num_frames=41", "height=512", "width=512", "steps=2"],
    ["num_frames=201", "height=384", "width=384", "steps=1"],
    ["num_frames=81", "height=480", "width=832", "steps=1"],
]


def main() -> None:
    print(f"load average {open('/proc/loadavg').read().split()[:3]}")
    print("| run (tiny, bf16) | FLOPs | measured GEMM | estimate | denoise + decode ran | estimate / ran |")
    print("|---|---|---|---|---|---|")
    for overrides in RUNS:
        spec = resolve({**compose_settings(overrides), "output_dir": "unused"}, 1)
        flops = job_flops(spec, *architecture_of(spec, None))
        speed = measure_device("torch", "cpu", spec.execution.dtype)
        with tempfile.TemporaryDirectory() as out:
            subprocess.run(
                [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}/v", *overrides],
                check=True,
                capture_output=True,
            )
            with open(f"{out}/v/video.json") as f:
                timings = json.load(f)["timings_s"]
        ran = timings["denoise"] + timings["vae_decode"]
        guess = estimate_seconds(flops, speed.flops, speed.cpu)
        print(
            f"| {' '.join(overrides)} | {flops.total / 1e12:.2f} TFLOP | {speed.flops / 1e9:.1f} GFLOP/s | "
            f"{duration(guess)} "
            f"| {duration(ran)} | {guess / ran:.2f} |",
            flush=True,
        )
    print(f"load average {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
