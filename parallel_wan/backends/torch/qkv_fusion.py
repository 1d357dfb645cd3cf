"""q/k/v fused into one weight at placement (compile=true's hot path; the block compilation
itself is a block runner, runners/compiled.py).

`fuse_qkv` replaces each block's self-attention `to_q`, `to_k`, `to_v` by one `to_qkv`
(weight (3·dim, dim), rows q ‖ k ‖ v); `models/transformer.py` sees the key and runs one GEMM
instead of three: x is read once and the larger product runs closer to the matmul peak. The
split of the output is exact, so results change only by the GEMM's own rounding. Cross-attention
stays unfused: its q reads the video tokens and k/v the text, different inputs. It is a
placement concern, not a runner's: the fused weights are what the device holds.
"""

from __future__ import annotations

import torch


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
    # Every tensor of a linear layer is per output row (weight, bias, a quantized weight's
    # weight_scale), so each fuses by concatenating its rows q ‖ k ‖ v.
    attn["to_qkv"] = {name: torch.cat([p[name] for p in parts], dim=0) for name in parts[0]}
    return {**block, "attn1": attn}
