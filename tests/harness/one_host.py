"""The one-host JAX video the two-host tests compare against, rendered once per test session.

tests/parallel/test_jax_multihost.py (two processes running the CLI) and
tests/serve/test_jax_multihost_server.py (a server on two processes) both check that two hosts
render the one-host video of mesh cp4 bit for bit. They ask for the same video (RUN, with the
prompt and seed below), so one `python -m parallel_wan.run` on 4 CPU devices serves both: the
first test to ask renders it into the session's shared temporary folder under a file lock, the
other (on either xdist worker) reads it. Nothing is shared between sessions.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from harness.xla_flags import host_flags

# bf16 (the default dtype, named: the server tests start in fp32), the tiny model,
# 2 steps of a 64×64×5 video on mesh cp4
RUN = [
    "backend=jax",
    "mesh=cp4",
    "model=tiny",
    "dtype=bfloat16",
    "steps=2",
    "num_frames=5",
    "height=64",
    "width=64",
    "save_frames=true",
]
PROMPT, SEED = "a red kite", 7


def _session_folder(tmp_path_factory) -> Path:
    """A folder every worker of this test session sees: xdist gives each worker its own base
    temporary folder inside one per session; without xdist the base folder is the session's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def one_host_video(tmp_path_factory) -> Path:
    """The folder of the one-host run of RUN (video.json, frames.npy), rendered on first use."""
    root = _session_folder(tmp_path_factory)
    out = root / "one_host_jax_cp4"
    with open(root / "one_host_jax_cp4.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits while the first one renders
        if not (out / "video.json").exists():
            env = os.environ | {"XLA_FLAGS": host_flags(4), "OMP_NUM_THREADS": "1"}
            env = {k: v for k, v in env.items() if not k.startswith("JAX_")} | {"JAX_PLATFORMS": "cpu"}
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "parallel_wan.run",
                    *RUN,
                    f"prompt='{PROMPT}'",
                    f"seed={SEED}",
                    f"output_dir={out}",
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr[-3000:]
    return out


def frames_sha(folder: Path) -> str:
    return json.loads((folder / "video.json").read_text())["frames_sha256"]


def frames(folder: Path) -> np.ndarray:
    return np.load(folder / "frames.npy")
