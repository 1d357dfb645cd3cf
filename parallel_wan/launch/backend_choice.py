"""backend=auto: which backend a run uses when none is named, from how the process was started
and what devices the host has — without importing torch or jax (a TPU host's torch may lack
CUDA and a GPU host's jax may lack plugins; files under /dev and /proc tell the truth cheaply).

  torchrun or srun started it                → torch (one process per device)
  a JAX coordinator or a TPU slice started it → jax
  NVIDIA GPUs on the host                     → torch
  TPU chips on the host                       → jax   (/dev/accel*, or a Google PCI device)
  otherwise (a plain CPU host)                → torch

`jax_platforms` makes the like decision for JAX itself: on a host where JAX can only run on the
CPU, it is told so before it loads, so it does not probe libtpu.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import MutableMapping

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


# Variables that configure libtpu or a TPU job (launch/'s TPU kind reads TPU_WORKER_HOSTNAMES,
# TPU_PROCESS_ADDRESSES and MEGASCALE_*; GKE and TPU VMs set TPU_ACCELERATOR_TYPE, TPU_WORKER_ID, …);
# JAX_FORCE_TPU_INIT is JAX's own "initialize the TPU even without chips".
TPU_ENV_PREFIXES = ("TPU_", "MEGASCALE_")
TPU_ENV = ("JAX_FORCE_TPU_INIT",)


def tpu_configured(env) -> bool:
    return any(k.startswith(TPU_ENV_PREFIXES) or k in TPU_ENV for k in env)


def jax_plugins_installed() -> bool:
    """Whether JAX would find a PJRT plugin (CUDA, ROCm, …) here: a module under the
    `jax_plugins` namespace package or a `jax_plugins` entry point — where JAX looks
    (xla_bridge.discover_pjrt_plugins). Without one, JAX's platforms are its built-in `cpu`
    and `tpu` (libtpu, which is no plugin)."""
    from importlib.metadata import entry_points

    return importlib.util.find_spec("jax_plugins") is not None or bool(entry_points(group="jax_plugins"))


def jax_platforms(env=os.environ, root: str = "") -> str | None:
    """The JAX_PLATFORMS to give JAX on this host, or None to leave JAX's choice alone.

    Left alone, JAX tries every platform it has, the TPU first: with libtpu installed (the `test`
    extra, jax[tpu]) that prints libtpu's errors on a host with no TPU and takes
    /tmp/libtpu_lockfile. "cpu" is named only when it is what JAX would end up with anyway: no
    TPU chips, no TPU job or libtpu settings in the environment, no JAX plugin (a GPU plugin
    may start, and which do is JAX's to find out — naming them would turn one that fails into
    an error). A JAX_PLATFORMS the user set, even empty, is theirs."""
    if "JAX_PLATFORMS" in env or tpu_configured(env) or tpu_present(root) or jax_plugins_installed():
        return None
    return "cpu"


def keep_jax_off_libtpu(env: MutableMapping[str, str] = os.environ, root: str = "") -> None:
    """Set `jax_platforms`' answer in `env`. Must run before jax is imported: JAX reads
    JAX_PLATFORMS once, at import."""
    platforms = jax_platforms(env, root)
    if platforms is not None:
        env["JAX_PLATFORMS"] = platforms


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
