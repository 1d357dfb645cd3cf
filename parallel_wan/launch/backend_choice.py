"""backend=auto: which backend a run uses when none is named, from how the process was started
and what devices the host has — without importing torch or jax (a TPU host's torch may lack
CUDA and a GPU host's jax may lack plugins; files under /dev and /proc tell the truth cheaply).

  torchrun or srun started it                → torch (one process per device)
  a JAX coordinator or a TPU slice started it → jax
  NVIDIA GPUs on the host                     → torch
  TPU chips on the host                       → jax   (/dev/accel*, or a Google PCI device)
  otherwise (a plain CPU host)                → torch
"""

from __future__ import annotations

import glob
import os

from . import JAX, SLURM, TORCHRUN, TPU, Launch

CUDA_PATHS = ("/proc/driver/nvidia/gpus/*", "/dev/nvidia[0-9]*")
TPU_PATHS = ("/dev/accel[0-9]*",)  # TPU v2–v4 VMs
GOOGLE_PCI_VENDOR = "0x1ae0"  # TPU v5e/v5p/v6e chips (behind /dev/vfio): what JAX's own TPU check reads


def present(patterns, root: str = "") -> bool:
    return any(glob.glob(root + p) for p in patterns)


def tpu_present(root: str = "") -> bool:
    if present(TPU_PATHS, root):
        return True
    for vendor in glob.glob(root + "/sys/bus/pci/devices/*/vendor"):
        try:
            with open(vendor) as f:
                if f.read().strip() == GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


def choose_backend(launch: Launch, root: str = "") -> tuple[str, str]:
    """(backend, why). `root` prefixes the device paths (tests fake a host under a folder)."""
    if launch.kind in (TORCHRUN, SLURM):
        return "torch", f"started by {launch.kind}"
    if launch.kind in (JAX, TPU):
        return "jax", f"started as a {'JAX' if launch.kind == JAX else 'TPU'} job"
    if present(CUDA_PATHS, root):
        return "torch", "NVIDIA GPUs on this host"
    if tpu_present(root):
        return "jax", "TPU chips on this host"
    return "torch", "no GPU or TPU on this host"


def node_size(env=os.environ) -> int | None:
    """Processes per node as the launcher says (torchrun's LOCAL_WORLD_SIZE, SLURM's tasks per
    node), or None (all on one node)."""
    for key in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        value = env.get(key, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None
