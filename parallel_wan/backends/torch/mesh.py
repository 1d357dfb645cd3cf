"""The process groups of a dp × (ring × ulysses) mesh under torch.distributed.

One object builds every group once (all ranks must call `new_group` for every group, in the
same order) and the rest of the code asks it: `mesh.group("ulysses")`, `mesh.size("ring")`,
`mesh.index("cp")`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.distributed as dist

from ...config import MeshSpec

AXES = ("dp", "cp", "ring", "ulysses")


@dataclass
class TorchMesh:
    spec: MeshSpec
    rank: int = 0
    _groups: dict = field(default_factory=dict)
    _ranks: dict = field(default_factory=dict)

    @classmethod
    def build(cls, spec: MeshSpec) -> "TorchMesh":
        """Create the groups. Without an initialised process group (one process) every axis is
        trivial and no group is made."""
        rank = dist.get_rank() if dist.is_initialized() else 0
        mesh = cls(spec, rank)
        for axis in AXES:
            for ranks in spec.groups(axis):
                group = dist.new_group(ranks) if dist.is_initialized() and spec.world_size > 1 else None
                if rank in ranks:
                    mesh._groups[axis], mesh._ranks[axis] = group, ranks
        return mesh

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    def size(self, axis: str) -> int:
        return len(self._ranks[axis])

    def index(self, axis: str) -> int:
        return self.spec.coords(self.rank)[axis]

    def group(self, axis: str):
        return self._groups[axis]

    def ranks(self, axis: str) -> list[int]:
        """Global ranks of this rank's group along `axis`, in axis order."""
        return self._ranks[axis]
