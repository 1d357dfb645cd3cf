"""The PyTorch world of a job, started before any backend exists (torchtitan's order): which
device this process takes, that device made current, and the process group joined. This is the
one place the process-wide state of a torch run is set; `TorchBackend` is then constructed from
the device and a mesh and changes nothing global (backends/__init__.py `make_backend`).
"""

from __future__ import annotations

import datetime
import logging
import os

import torch
import torch.distributed as dist

from ...errors import ConfigError
from ...launch import SINGLE, TORCHRUN, Launch, detect, require_coordinator

__all__ = ["Launch", "launch_from_env", "pick_device", "init_distributed", "start_world", "shutdown"]
log = logging.getLogger("parallel_wan")


def start_world(launch: Launch | None, device: str = "auto", dist_timeout_s: float = 600.0) -> torch.device:
    """This process's device, made current (CUDA), and the job's process group joined (several
    processes): everything process-wide a torch run needs, in that order. Returns the device."""
    launch = launch or Launch(0, 1, 0, "single process")
    chosen = pick_device(device, launch.local_rank, launch.world_size)
    if chosen.type == "cuda":
        torch.cuda.set_device(chosen)  # NCCL, cuDNN and the kernels' streams use the current device
    init_distributed(launch, chosen, dist_timeout_s)
    return chosen


def pick_device(setting: str, local_rank: int = 0, world_size: int = 1) -> torch.device:
    """The device of this process (one process per device under torchrun/srun).

    auto: cuda:LOCAL_RANK when CUDA is present, else cpu. cuda: cuda:LOCAL_RANK, so every rank
    of a node gets its own GPU (a bare torch.device("cuda") has no index, which
    torch.cuda.set_device refuses, and would put every rank on GPU 0). cuda:N: GPU N, for one
    process only: under a launcher every rank would take the same GPU and NCCL would fail at
    the first collective, so it is refused here, before anything loads. Raises ConfigError
    (one line naming the setting and the fix)."""
    if setting == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        return torch.device("cpu")
    try:
        device = torch.device(setting)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device={setting!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise ConfigError(f"device={setting} is not supported by backend=torch; use auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device={setting} but this machine has no CUDA device torch can use; use device=cpu or device=auto"
        )
    count = torch.cuda.device_count()
    if device.index is None:
        return torch.device("cuda", local_rank % count)
    if world_size > 1:
        raise ConfigError(
            f"device={setting} with {world_size} processes would put every rank on GPU {device.index}; "
            "use device=cuda (or auto): each rank takes cuda:LOCAL_RANK "
            "(choose GPUs with CUDA_VISIBLE_DEVICES)"
        )
    if device.index >= count:
        raise ConfigError(
            f"device={setting} but this machine has {count} CUDA device{'s' if count > 1 else ''} "
            f"(cuda:0…cuda:{count - 1}); pick one of those or use device=auto"
        )
    return device


def launch_from_env(env=os.environ) -> Launch:
    """Rank, world size and coordinator from torchrun, srun (SLURM), JAX or TPU variables
    (parallel_wan/launch/); one process when there are none."""
    return require_coordinator(detect(env))


def init_distributed(launch: Launch, device: torch.device, timeout_s: float) -> None:
    """Join the process group (NCCL on CUDA, gloo on CPU). The timeout bounds how long a rank
    waits on a peer that died, so a failure ends the job instead of hanging it.

    Under torchrun the group starts from its variables (env://; torchrun's agent may host the
    store). Every other launcher only says where rank 0 is, so the group starts from an
    explicit tcp://host:port with this process's rank: rank 0 listens there, the rest connect."""
    if launch.world_size == 1 or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if backend == "nccl" else {}
    if launch.kind not in (TORCHRUN, SINGLE):
        kwargs.update(init_method=f"tcp://{launch.coordinator}", rank=launch.rank, world_size=launch.world_size)
    log.info("distributed: %s; %s process group", launch.describe(), backend)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
