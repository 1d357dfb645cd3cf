"""The few exchanges the orchestrator makes over the mesh (the process group itself is started
in world.py; the `Collectives` they go through are in collectives.py).

Everything a rank exchanges in a generation: the text embeddings (broadcast once from rank 0),
the two CFG halves' noise predictions (once per step, over dp), and the final tokens (once,
over cp, for the VAE). Attention's own traffic lives in ulysses.py / ring.py. All of it goes
through the mesh's collectives (`mesh.comm`, parallel/collectives.py).
"""

from __future__ import annotations

import numpy as np
import torch

from .mesh import TorchMesh

__all__ = ["MeshExchanges"]


class MeshExchanges:
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
