"""Running the launch scripts and torchrun as the tests do: the scripts, a run small enough for
seconds, and the launcher variables a test's own environment must not leak into its processes."""

import os

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
