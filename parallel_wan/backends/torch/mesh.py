"""The process groups of a dp × (ring × ulysses) mesh, made through the run's collectives.

One object builds every group once (all ranks must call `new_group` for every group, in the
same order) and the rest of the code asks it: `mesh.group("ulysses")`, `mesh.size("ring")`,
`mesh.index("cp")`, and `mesh.comm`, the collectives those groups belong to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...parallel.collectives import Collectives
from ...parallel.mesh import AXES, MeshSpec
from .collectives import ProcessGroupCollectives


@dataclass
class TorchMesh:
    spec: MeshSpec
    comm: Collectives
    rank: int = 0
    _groups: dict = field(default_factory=dict)
    _ranks: dict = field(default_factory=dict)

    @classmethod
    def build(cls, spec: MeshSpec, comm: Collectives | None = None) -> TorchMesh:
        """Create the groups through `comm` (default: torch.distributed's process group; one
        process makes no group, every axis being trivial)."""
        comm = ProcessGroupCollectives() if comm is None else comm
        mesh = cls(spec, comm, comm.rank)
        for axis in AXES:
            for ranks in spec.groups(axis):
                group = comm.new_group(ranks) if spec.world_size > 1 else None
                if mesh.rank in ranks:
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
