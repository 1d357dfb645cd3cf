"""torch.distributed start-up and the few collectives the orchestrator needs.

Everything a rank exchanges in a generation: the text embeddings (broadcast once from rank 0),
the two CFG halves' noise predictions (once per step, over dp), and the final tokens (once,
over cp, for the VAE). Attention's own traffic lives in ulysses.py / ring.py.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .mesh import TorchMesh


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int
    source: str  # which launcher's variables were found


def launch_from_env(env=os.environ) -> Launch:
    """Rank and world size from torchrun's variables; one process when there are none."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return Launch(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", env["RANK"])), "torchrun")
    return Launch(0, 1, 0, "single process")


def init_distributed(launch: Launch, device: torch.device, timeout_s: float) -> None:
    """Join the process group (NCCL on CUDA, gloo on CPU). The timeout bounds how long a rank
    waits on a peer that died, so a failure ends the job instead of hanging it."""
    if launch.world_size == 1 or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class Collectives:
    def __init__(self, mesh: TorchMesh):
        self.mesh = mesh

    @property
    def distributed(self) -> bool:
        return self.mesh.world_size > 1

    def broadcast_from_rank0(self, tensor: torch.Tensor | None, device: torch.device) -> torch.Tensor:
        """Rank 0's tensor on every rank (others pass None); shape and dtype travel first."""
        if not self.distributed:
            return tensor
        meta = [None if tensor is None else (tuple(tensor.shape), tensor.dtype)]
        dist.broadcast_object_list(meta, src=0)
        shape, dtype = meta[0]
        buf = tensor.contiguous().to(device) if tensor is not None else torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(buf, src=0)
        return buf

    def _all_gather(self, local: torch.Tensor, axis: str) -> list[torch.Tensor]:
        parts = [torch.empty_like(local) for _ in range(self.mesh.size(axis))]
        dist.all_gather(parts, local.contiguous(), group=self.mesh.group(axis))
        return parts

    def gather_tokens(self, local: torch.Tensor) -> torch.Tensor:
        """(B, Lc, F) on every cp rank → (B, cp·Lc, F), in cp order (the layout of sharding.py)."""
        if self.mesh.size("cp") == 1:
            return local
        return torch.cat(self._all_gather(local, "cp"), dim=1)

    def exchange_dp(self, local: torch.Tensor) -> list[torch.Tensor]:
        """Each dp rank's tensor, in dp order (CFG parallel: [cond, uncond])."""
        if self.mesh.size("dp") == 1:
            return [local]
        return self._all_gather(local, "dp")
