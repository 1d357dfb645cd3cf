"""The mesh of a run, validated once: world = dp × cp, cp = ring × ulysses (torchtitan's
`ParallelDims` is the model). Torch- and JAX-free, so the config check, the planner and both
backends read the same object.

Rank order: dp outermost, then ring, ulysses innermost, so an all-to-all stays within
consecutive ranks (one node's NVLink, one chip's ICI) and only the ring crosses nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError

AXES = ("dp", "cp", "ring", "ulysses")


@dataclass(frozen=True)
class MeshSpec:
    """world = dp × cp, cp = ring × ulysses; see the module docstring for the rank order."""

    name: str = "single"
    dp: int = 1
    cp: int = 1
    ulysses: int = 1
    ring: int = 1

    @property
    def world_size(self) -> int:
        return self.dp * self.cp

    def to_dict(self) -> dict:
        """The mesh as settings (`mesh_spec` takes it back)."""
        return {"name": self.name, "dp": self.dp, "cp": self.cp, "ulysses": self.ulysses, "ring": self.ring}

    def coords(self, rank: int) -> dict[str, int]:
        """This rank's index along each axis (and its index within cp)."""
        return {
            "dp": rank // self.cp,
            "cp": rank % self.cp,
            "ring": (rank % self.cp) // self.ulysses,
            "ulysses": rank % self.ulysses,
        }

    def groups(self, axis: str) -> list[list[int]]:
        """Every group of ranks that varies only along `axis` ("dp", "cp", "ring", "ulysses")."""
        others = {"dp": ("ring", "ulysses"), "cp": ("dp",), "ring": ("dp", "ulysses"), "ulysses": ("dp", "ring")}[axis]
        out: dict[tuple, list[int]] = {}
        for rank in range(self.world_size):
            c = self.coords(rank)
            out.setdefault(tuple(c[k] for k in others), []).append(rank)
        return list(out.values())

    def group_of(self, axis: str, rank: int) -> list[int]:
        """The ranks of `rank`'s group along `axis`, in axis order."""
        return next(ranks for ranks in self.groups(axis) if rank in ranks)

    def size(self, axis: str) -> int:
        return {"dp": self.dp, "cp": self.cp, "ring": self.ring, "ulysses": self.ulysses}[axis]


def mesh_spec(cfg: Mapping, world_size: int = 1, heads: int | None = None, single_controller: bool = False) -> MeshSpec:
    """Validate the mesh degrees against each other, the world size and (when known) the
    attention head count. One process per device (torch): the world size is the number of
    processes and must equal dp×cp; a single controller (JAX: one process drives every local
    device): it is the number of devices, and a mesh may use the first dp×cp of them."""
    known = ("name", "dp", "cp", "ulysses", "ring")
    unknown = set(cfg) - set(known)
    if unknown:
        raise ConfigError(f"mesh has unknown keys {sorted(unknown)}; a mesh sets {', '.join(known)}")
    mesh = MeshSpec(**{k: cfg[k] for k in known if k in cfg})
    name = f"mesh={mesh.name}"
    for axis in ("dp", "cp", "ulysses", "ring"):
        value = getattr(mesh, axis)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}: mesh.{axis}={value!r} must be a whole number ≥ 1")
    if mesh.cp != mesh.ulysses * mesh.ring:
        raise ConfigError(
            f"{name}: cp={mesh.cp} must equal ulysses×ring={mesh.ulysses}×{mesh.ring}={mesh.ulysses * mesh.ring}; "
            f"set mesh.ulysses and mesh.ring so their product is {mesh.cp}"
        )
    if single_controller:
        check_jax_devices(mesh, world_size)
    elif mesh.world_size != world_size:
        launch = f"torchrun --nproc-per-node {mesh.world_size} -m parallel_wan.run mesh={mesh.name}"
        raise ConfigError(
            f"{name} needs dp×cp={mesh.dp}×{mesh.cp}={mesh.world_size} processes but {world_size} were started; "
            + (
                f"launch with `{launch}`"
                if mesh.world_size > 1
                else "run without torchrun or pick a mesh for this world size"
            )
        )
    if heads is not None:
        check_heads(mesh, heads)
    return mesh


def check_heads(mesh: MeshSpec, heads: int) -> None:
    """Ulysses hands each rank heads/ulysses whole heads; the ring has no such limit."""
    if heads % mesh.ulysses:
        u = max(u for u in range(1, mesh.cp + 1) if mesh.cp % u == 0 and heads % u == 0)
        raise ConfigError(
            f"mesh={mesh.name}: ulysses={mesh.ulysses} does not divide the model's {heads} attention heads; "
            f"use mesh.ulysses={u} mesh.ring={mesh.cp // u} (ring has no head limit)"
        )


def check_jax_devices(mesh: MeshSpec, devices: int) -> None:
    if mesh.world_size > devices:
        raise ConfigError(
            f"mesh={mesh.name} needs dp×cp={mesh.dp}×{mesh.cp}={mesh.world_size} JAX devices but {devices} "
            f"{'is' if devices == 1 else 'are'} visible; pick a smaller mesh, or on CPU set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={mesh.world_size} before starting"
        )
