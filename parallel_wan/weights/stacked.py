"""Destination buffers for a transformer's tensors, one stacked buffer per repeated block tensor.

The 40 blocks of a Wan expert hold the same tensors under the same names. For each such name
the loader allocates ONE buffer of shape (layers, *shape) and copies layer i's tensor into
slice i; the per-layer dicts the torch model walks (`params["blocks"][i]`) hold views of those
slices, so torch code is unchanged while the memory is already in the layout a layer scan
(JAX) or a cache file wants: one allocation per name, not per layer.

A name is stacked only when every layer 0…L-1 has it with the same shape and dtype; anything
else (a ragged run, a non-block tensor) gets its own buffer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from parallel_wan.weights.copy_pool import host_empty

STACKED_RUNS = ("blocks",)
WILDCARD = "*"  # "blocks.*.attn1.to_q.weight" names the stacked buffer of that tensor
_LAYER_NAME = re.compile(r"^(?P<run>[^.]+)\.(?P<index>\d+)\.(?P<rest>.+)$")


@dataclass
class Buffers:
    """flat: diffusers name → destination tensor (a view into a stacked buffer where stacked).
    stacked: "blocks.*.rest" → the (layers, *shape) buffer those views share."""

    flat: dict[str, torch.Tensor] = field(default_factory=dict)
    stacked: dict[str, torch.Tensor] = field(default_factory=dict)


def stacked_name(run: str, rest: str) -> str:
    return f"{run}.{WILDCARD}.{rest}"


def split_stacked_name(name: str) -> tuple[str, str] | None:
    """("blocks", "attn1.to_q.weight") for "blocks.*.attn1.to_q.weight", else None."""
    run, _, rest = name.partition(f".{WILDCARD}.")
    return (run, rest) if rest and run in STACKED_RUNS else None


def layer_names(run: str, rest: str, layers: int) -> list[str]:
    return [f"{run}.{i}.{rest}" for i in range(layers)]


def stacked_runs(targets: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> dict[str, list[str]]:
    """Stacked name → the per-layer names it holds, in layer order, for the names that stack."""
    groups: dict[tuple[str, str], dict[int, str]] = {}
    for name in targets:
        match = _LAYER_NAME.match(name)
        if match and match["run"] in STACKED_RUNS:
            groups.setdefault((match["run"], match["rest"]), {})[int(match["index"])] = name
    runs = {}
    for (run, rest), by_index in groups.items():
        names = [by_index.get(i) for i in range(len(by_index))]
        if len(names) > 1 and all(names) and len({targets[n] for n in names}) == 1:
            runs[stacked_name(run, rest)] = names
    return runs


def allocate(targets: dict[str, tuple[tuple[int, ...], torch.dtype]], stack: bool = True) -> Buffers:
    """Uninitialised destinations for `targets` (name → (shape, dtype)), stacked where possible."""
    buffers = Buffers()
    runs = stacked_runs(targets) if stack else {}
    for key, names in runs.items():
        shape, dtype = targets[names[0]]
        buffer = host_empty((len(names), *shape), dtype)
        buffers.stacked[key] = buffer
        for i, name in enumerate(names):
            buffers.flat[name] = buffer[i]
    for name, (shape, dtype) in targets.items():
        if name not in buffers.flat:
            buffers.flat[name] = host_empty(shape, dtype)
    buffers.flat = {name: buffers.flat[name] for name in targets}  # the checkpoint's order
    return buffers
