"""torch.distributed start-up and the few exchanges the orchestrator makes over the mesh.

Everything a rank exchanges in a generation: the text embeddings (broadcast once from rank 0),
the two CFG halves' noise predictions (once per step, over dp), and the final tokens (once,
over cp, for the VAE). Attention's own traffic lives in ulysses.py / ring.py. All of it goes
through the mesh's collectives (`mesh.comm`, parallel/collectives.py).
"""

from __future__ import annotations

import datetime
import logging
import os

import numpy as np
import torch
import torch.distributed as dist

from ...launch import SINGLE, TORCHRUN, Launch, detect, require_coordinator
from .mesh import TorchMesh

__all__ = ["Launch", "launch_from_env", "init_distributed", "shutdown", "MeshCollectives"]
log = logging.getLogger("parallel_wan")


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


class MeshCollectives:
    """The run's exchanges along the mesh's axes, through `mesh.comm`."""

    def __init__(self, mesh: TorchMesh):
        self.mesh, self.comm = mesh, mesh.comm

    @property
    def distributed(self) -> bool:
        return self.mesh.world_size > 1

    def broadcast_from_rank0(self, tensor: torch.Tensor | None, device: torch.device) -> torch.Tensor:
        """Rank 0's tensor on every rank (others pass None); shape and dtype travel first."""
        if not self.distributed:
            return tensor
        shape, dtype = self.comm.broadcast_object(None if tensor is None else (tuple(tensor.shape), tensor.dtype), 0)
        buf = tensor.contiguous().to(device) if tensor is not None else torch.empty(shape, dtype=dtype, device=device)
        self.comm.broadcast(buf, 0)
        return buf

    def _all_gather(self, local: torch.Tensor, axis: str) -> list[torch.Tensor]:
        parts = [torch.empty_like(local) for _ in range(self.mesh.size(axis))]
        self.comm.all_gather(parts, local.contiguous(), self.mesh.group(axis))
        return parts

    def gather_tokens(self, local: torch.Tensor) -> torch.Tensor:
        """(B, Lc, F) on every cp rank → (B, cp·Lc, F), in cp order (the layout of parallel/shards.py)."""
        if self.mesh.size("cp") == 1:
            return local
        return torch.cat(self._all_gather(local, "cp"), dim=1)

    def sum_to_host(self, local: torch.Tensor, axis: str) -> np.ndarray:
        """`local` summed over this rank's group along `axis` ("cp", or "world": every rank),
        as a host array. The parts are gathered and added in rank order, so every rank gets
        the same bits (a step cache's decision from it is the same on every rank)."""
        size = self.mesh.world_size if axis == "world" else self.mesh.size(axis)
        if size == 1:
            return local.double().cpu().numpy()
        parts = [torch.empty_like(local) for _ in range(size)]
        self.comm.all_gather(parts, local.contiguous(), None if axis == "world" else self.mesh.group(axis))
        return sum(p.double() for p in parts).cpu().numpy()

    def exchange_dp(self, local: torch.Tensor) -> list[torch.Tensor]:
        """Each dp rank's tensor, in dp order (CFG parallel: [cond, uncond])."""
        if self.mesh.size("dp") == 1:
            return [local]
        return self._all_gather(local, "dp")
