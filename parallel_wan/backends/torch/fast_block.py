"""The PyTorch hot path: q/k/v fused into one weight, and the transformer block compiled.

Fusion. `fuse_qkv` replaces each block's self-attention `to_q`, `to_k`, `to_v` by one `to_qkv`
(weight (3·dim, dim), rows q ‖ k ‖ v); `models/transformer.py` sees the key and runs one GEMM
instead of three: x is read once and the larger product runs closer to the matmul peak. The
split of the output is exact, so results change only by the GEMM's own rounding. Cross-attention
stays unfused: its q reads the video tokens and k/v the text, different inputs.

Compilation ("regional", as torchtitan and gpt-fast do it): `torch.compile` of the one block
function that every layer runs, not of the whole forward — 40 identical layers compile once,
and the embeddings and head, a fraction of a percent of the work, stay eager. Inductor fuses the
norm + modulation + cast chains, RMSNorm and RoPE around the GEMMs. Self-attention is excluded
from the graph (`torch.compiler.disable`): the sequence-parallel callable issues collectives and
picks its kernel at run time (attention.py), and the kernel itself is already one fused op.

CUDA graphs (`cuda_graphs=True`: inductor's "reduce-overhead" mode) remove per-kernel launch
cost, which matters only when kernels are short (small token counts); the weights are marked as
static addresses so each replay does not copy them in.
"""

from __future__ import annotations

from typing import Callable

import torch

from ...models import transformer as dit
from . import ops as torch_ops


def fuse_qkv(params: dict) -> dict:
    """A new param tree whose blocks hold `attn1.to_qkv` instead of `to_q`, `to_k`, `to_v`.
    The input tree is not changed; leaves other than the fused ones are shared, not copied."""
    return {**params, "blocks": [fuse_block_qkv(block) for block in params["blocks"]]}


def fuse_block_qkv(block: dict) -> dict:
    """One block with its self-attention's q, k, v weights fused into `attn1.to_qkv`. The
    placement fuses block by block as it moves them, so the unfused copies of only one block
    ever exist beside the fused ones on the device."""
    attn = dict(block["attn1"])
    parts = [attn.pop(name) for name in ("to_q", "to_k", "to_v")]
    attn["to_qkv"] = {
        "weight": torch.cat([p["weight"] for p in parts], dim=0),
        "bias": torch.cat([p["bias"] for p in parts], dim=0),
    }
    return {**block, "attn1": attn}


class BlockForward:
    """`forward(params, tokens, timestep, context, rope, cfg)`: the DiT forward of
    `models/transformer.forward` with each layer's block optionally compiled.

    attention: the self-attention callable (sequence-parallel or local), kept eager.
    compile: torch.compile the block. cuda_graphs: compile in "reduce-overhead" mode (CUDA).
    backend: torch.compile's backend; "inductor" generates kernels, "aot_eager" only captures
    the graphs (tests use it: the capture is what this file decides; inductor's CPU C++ build
    takes ~50 s on the 2-core dev machine).
    """

    def __init__(self, attention: Callable, compile: bool = False, cuda_graphs: bool = False,
                 backend: str = "inductor"):
        if cuda_graphs and not compile:
            raise ValueError("cuda_graphs=True needs compile=True: the CUDA graphs are captured by torch.compile")
        self.compile, self.cuda_graphs = compile, cuda_graphs
        # One wrapper for the object's life: a new one per call would fail the compiled
        # block's guard on its `attention` argument and recompile every forward.
        self.attention = torch.compiler.disable(attention) if compile else attention
        if compile:
            mode = "reduce-overhead" if cuda_graphs else None
            self.block = torch.compile(dit.transformer_block, dynamic=False, mode=mode, backend=backend)
        else:
            self.block = dit.transformer_block
        self._static: set[int] = set()

    def _mark_static(self, params) -> None:
        for block in params["blocks"]:
            for leaf in _leaves(block):
                if id(leaf) not in self._static:
                    torch._dynamo.mark_static_address(leaf)
                    self._static.add(id(leaf))

    def __call__(self, params, tokens, timestep, context, rope, cfg):
        ops = torch_ops
        if self.cuda_graphs:
            self._mark_static(params)
            torch.compiler.cudagraph_mark_step_begin()
        x = dit.embed_patches(params, tokens, cfg, ops)
        temb, proj, ctx = dit.condition(params, timestep, context, cfg, ops)
        for p in params["blocks"]:
            x = self.block(p, x, ctx, proj, rope, cfg, ops, self.attention)
        # The head runs eagerly, so what returns is an ordinary tensor, never one in a CUDA
        # graph's pool that the next replay would overwrite.
        return dit.output_head(params, x, temb, cfg, ops)


def _leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _leaves(v)
    elif isinstance(tree, torch.Tensor):
        yield tree
