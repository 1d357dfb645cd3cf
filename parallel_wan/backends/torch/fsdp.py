"""memory=sharded on PyTorch: each rank keeps dim-0 chunks of every transformer weight and
gathers one block's full weights at a time, just before the block runs.

FSDP2 does the bookkeeping (`torch.distributed.fsdp.fully_shard`, Shard(0) = `torch.chunk`
rows, the layout `weights.loader.load_transformer(shard=(rank, world))` reads). We never call
the holders' forward: the model is a function of a param tree, so FSDP's hooks never fire and
the schedule is ours, through FSDP2's explicit API — `unshard(async_op=True)` starts block i+1's
all-gather while block i computes; `reshard()` frees block i's gathered storage once it has run.
Checked on torch 2.13: FSDP2 runs on CPU/gloo and inside `torch.inference_mode()` (it guards
its in-place copies for inference tensors), and mixed dtypes in one block (fp32 norms and
modulation, bf16 matrices) gather as bytes — so no hand-written all-gather fallback is needed.

Non-block weights (patch and condition embeddings, head, its table: ~2 % of an expert) are
gathered once, on the first forward, and stay whole.

The blocks reach the model as the list of their holders; the block runner
(runners/sharded.py) runs the gather/prefetch/free schedule in its own loop.
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist
import torch.nn as nn

from ...weights import tree as param_tree

_SEP = "__"  # module attribute names may not contain dots
_mesh_lock = threading.Lock()
_meshes: dict = {}


def fsdp_mesh(device_type: str):
    """One 1-D DeviceMesh over the whole world on its own process group, made once per world.
    Experts are placed from loader threads: a lock makes the one `new_group` (which every rank
    must call in the same order) happen exactly once whichever thread comes first. Its own
    group keeps the prefetching all-gathers off the groups attention uses. A process that
    destroys its world and joins a new one (a test's persistent rank process, a server that
    restarts its group) gets a mesh on the new world, never one on a destroyed group."""
    from torch.distributed.device_mesh import DeviceMesh

    with _mesh_lock:
        world, mesh = _meshes.get(device_type, (None, None))
        if world is not dist.group.WORLD:
            group = dist.new_group(list(range(dist.get_world_size())))
            mesh = DeviceMesh.from_group(group, device_type)
            _meshes[device_type] = (dist.group.WORLD, mesh)
        return mesh


class ParamHolder(nn.Module):
    """A bag of parameters under sanitized diffusers names, for `fully_shard` to own."""

    def __init__(self, shapes: dict[str, tuple[torch.Size, torch.dtype]]):
        super().__init__()
        self.names = {name: name.replace(".", _SEP) for name in shapes}
        for name, (shape, dtype) in shapes.items():
            self.register_parameter(
                self.names[name], nn.Parameter(torch.empty(shape, dtype=dtype, device="meta"), requires_grad=False)
            )

    def params(self) -> dict:
        """The diffusers-named tree of the tensors registered now: whole while unsharded."""
        return param_tree.unflatten({name: getattr(self, attr) for name, attr in self.names.items()})

    def local_chunks(self) -> dict[str, torch.Tensor]:
        """This rank's dim-0 chunk of each parameter (a view of FSDP's sharded storage)."""
        return {name: getattr(self, attr).to_local() for name, attr in self.names.items()}


def shard_holder(chunks: dict[str, torch.Tensor], full_rows: dict[str, int], device: torch.device) -> ParamHolder:
    """A ParamHolder sharded over the world whose chunks are `chunks` (torch.chunk rows of the
    full tensors, whose dim 0 is `full_rows`): built on the meta device so no rank ever holds a
    whole tensor, then each chunk is copied into FSDP's own (padded) shard storage."""
    from torch.distributed.fsdp import fully_shard

    shapes = {n: (torch.Size((full_rows[n], *c.shape[1:])) if c.ndim else c.shape, c.dtype) for n, c in chunks.items()}
    holder = ParamHolder(shapes)
    fully_shard(holder, mesh=fsdp_mesh(device.type), reshard_after_forward=True)
    holder.to_empty(device=device)
    with torch.no_grad():
        for name, local in holder.local_chunks().items():
            local.copy_(chunks[name])
    return holder


class ShardedExpert:
    """One expert under memory=sharded: `params()` → the tree `models.transformer.forward`
    takes, with the non-block weights whole and `blocks` the blocks' holders, for
    runners.sharded.ShardedRunner to gather one at a time."""

    def __init__(self, rest: ParamHolder, blocks: list[ParamHolder]):
        self.rest, self.blocks = rest, blocks
        self._rest_whole = None
        # FSDP keeps each shard's storage while its params are whole; count it now, while the
        # holders expose their shards.
        self._shard_bytes = sum(
            t.untyped_storage().nbytes() for h in [rest, *blocks] for t in h.local_chunks().values()
        )

    def params(self) -> dict:
        if self._rest_whole is None:
            # Gathered on first use, on the main thread in step order, so every rank issues the
            # collectives in the same order (placement runs on loader threads).
            self.rest.unshard()
            self._rest_whole = self.rest.params()
        return {**self._rest_whole, "blocks": self.blocks}

    def local_bytes(self) -> int:
        """Bytes this rank holds between blocks: its padded chunk of every tensor (FSDP pads
        dim 0 to a multiple of the world), plus the non-block tensors whole once gathered."""
        whole = 0
        if self._rest_whole is not None:
            whole = sum(t.numel() * t.element_size() for _, t in param_tree.iter_leaves(self._rest_whole))
        return self._shard_bytes + whole


def shard_expert(chunks_tree: dict, full_rows: dict[str, int], device: torch.device) -> ShardedExpert:
    """An expert from this rank's chunks (a params tree as `load_transformer(shard=(rank,
    world))` returns it); `full_rows`: diffusers name → the whole tensor's dim 0."""
    flat = param_tree.flatten(chunks_tree)
    blocks: dict[int, dict[str, torch.Tensor]] = {}
    rest = {}
    for name, chunk in flat.items():
        head, _, tail = name.partition(".")
        if head == "blocks":
            index, _, sub = tail.partition(".")
            blocks.setdefault(int(index), {})[sub] = chunk
        else:
            rest[name] = chunk
    block_rows = {}
    for index, tensors in blocks.items():
        block_rows[index] = {sub: full_rows[f"blocks.{index}.{sub}"] for sub in tensors}
    holders = [shard_holder(blocks[i], block_rows[i], device) for i in sorted(blocks)]
    return ShardedExpert(shard_holder(rest, {n: full_rows[n] for n in rest}, device), holders)
