"""Running the launch scripts and torchrun as the tests do: the scripts, a run small enough for
seconds, and the launcher variables a test's own environment must not leak into its processes."""

import os
import re
import time

import pytest

from harness.paths import REPO

TORCHRUN_SBATCH = os.path.join(REPO, "launchers", "slurm", "torchrun.sbatch")
SRUN_SBATCH = os.path.join(REPO, "launchers", "slurm", "srun.sbatch")

# The tiny model on CPU, small enough for seconds per run; dist_timeout_s bounds a rank
# waiting on a peer that failed to start.
RUN = [
    "steps=2",
    "num_frames=5",
    "height=64",
    "width=64",
    "dtype=float32",
    "save_frames=true",
    "dist_timeout_s=60",
    "prompt='a dog jumps'",
    "seed=3",
]
LAUNCH_VARS = (
    "SLURM_",
    "TORCHELASTIC_",
    "JAX_",
    "TPU_",
    "MEGASCALE_",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
)


def wait_for_log(path, pattern, proc, timeout=240):
    """Until `pattern` shows in the log file `path` of the running `proc` (a test fails if the
    process ends first, or after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the job ended ({proc.returncode}) before {pattern!r}:\n{path.read_text()[-3000:]}")
        if path.exists() and re.search(pattern, path.read_text()):
            return
        time.sleep(0.2)
    pytest.fail(f"{pattern!r} never showed:\n{path.read_text()[-3000:]}")
