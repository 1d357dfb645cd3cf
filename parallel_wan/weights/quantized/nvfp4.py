"""NVFP4's arithmetic (NVIDIA's 4-bit format, Blackwell's FP4 tensor cores): each weight is an
e2m1 value (±{0, 0.5, 1, 1.5, 2, 3, 4, 6}), two packed per byte; each block of 16 inputs of a
row has a float8_e4m3fn scale; a float32 global scale brings the block scales into e4m3's range:

    W[o, i] = e2m1(q[o, i]) · block[o, i // 16] · global[o]

The in-memory form (weights/quantized/__init__.py) keeps exactly these three tensors, per row:
`weight` uint8 (out, in/2) — element 2j in the low nibble, 2j+1 in the high one (NVIDIA's and
LightX2V's order; ComfyUI stores the other, swapped as its files load) —, `weight_scale`
float8_e4m3fn (out, in/16) in plain row order (the GEMM's swizzled layout is made as it runs,
so rows slice and q ‖ k ‖ v concatenate like any weight), `weight_scale_2` float32 (out, 1).
0.5 + 1/16 bytes per weight plus 4 per row: 0.56 bytes a weight against fp8's 1.

The global scale is per row here (absmax_row / (6 · 448), so every row's largest block gets
the largest e4m3 scale): rows quantize independently, so a sharded load quantizes only its
rows and gets the bytes of the whole load. Files hold one per tensor (ComfyUI's
`weight_scale_2` scalar), which loads expanded to its rows, exactly.
"""

from __future__ import annotations

import torch

from .scales import FP8_MAX, absmax_steps

BLOCK = 16  # inputs per e4m3 block scale
E2M1_MAX = 6.0
E4M3_MAX = FP8_MAX  # the block scales' dtype: e4m3
PACKED = torch.uint8  # the stored dtype of an NVFP4 weight (two e2m1 codes a byte)
SCALE = torch.float8_e4m3fn
# the midpoints between e2m1's magnitudes (0, 0.5, 1, 1.5, 2, 3, 4, 6), for rounding to the nearest
MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
TILE_ROWS, TILE_COLS = 128, 4  # the GEMM's block-scale tile (cuBLAS's 128x4 layout)


def is_nvfp4(weight: torch.Tensor, scale: torch.Tensor | None) -> bool:
    """A layer's weight and scale are NVFP4's form (packed bytes, e4m3 block scales)."""
    return scale is not None and weight.dtype == PACKED and scale.dtype == SCALE


def values(code: torch.Tensor) -> torch.Tensor:
    """float32 e2m1 values of 4-bit codes (any integer dtype): sign · 2^(e-1) · (1 + m/2), or
    m/2 for e = 0. Arithmetic, not a table: a table would be a host-to-device copy per layer."""
    code = code.to(torch.int32)
    e, m = ((code >> 1) & 3).to(torch.float32), (code & 1).to(torch.float32)
    magnitude = torch.where(e > 0, torch.exp2(e - 1) * (1 + m / 2), m / 2)
    return torch.where((code & 8) > 0, -magnitude, magnitude)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """float32 e2m1 values (…, 2·n) of packed bytes (…, n), low nibble first."""
    return values(torch.stack((packed & 0x0F, packed >> 4), dim=-1).flatten(-2))


def swap_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """ComfyUI's order (element 2j high) ↔ ours (low): the same bytes, nibbles exchanged."""
    return (packed << 4) | (packed >> 4)


def codes(x: torch.Tensor) -> torch.Tensor:
    """The nearest e2m1 code (uint8) of each value of x (already divided by its scales; values
    beyond ±6 saturate). A tie goes to the even code (mantissa 0), as the hardware's cvt.rn
    does: past midpoint k when above it, or on it with k odd (code k + 1 even)."""
    magnitude = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for k, mid in enumerate(MIDPOINTS):
        up = magnitude > mid if k % 2 == 0 else magnitude >= mid
        code = code + up.to(torch.uint8)
    return code | (torch.signbit(x).to(torch.uint8) << 3)


def pack(code: torch.Tensor) -> torch.Tensor:
    """(…, 2·n) codes → (…, n) bytes, element 2j in the low nibble."""
    return code[..., 0::2] | (code[..., 1::2] << 4)


def quantize(w: torch.Tensor, global_scale: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """(packed, block scales, global scale (rows, 1)) of a wide (rows, cols) weight, cols a
    multiple of 16. global_scale: one per row or a scalar (a file's per-tensor scale); None: per
    row, absmax / (6 · 448) (an all-zero row: 1). A block's scale is its absmax / 6 / global,
    rounded to e4m3; each value is rounded to the nearest e2m1 after dividing by both."""
    rows, cols = w.shape
    w32 = w.to(torch.float32).reshape(rows, cols // BLOCK, BLOCK)
    if global_scale is None:
        step = absmax_steps(w32, (1, 2), E2M1_MAX * E4M3_MAX).reshape(rows, 1)
        global_scale = torch.where(step > 0, step, torch.ones_like(step))
    g = global_scale.to(torch.float32).reshape(-1, 1).expand(rows, 1)
    block = (absmax_steps(w32, 2, E2M1_MAX) / g).clamp(max=E4M3_MAX).to(SCALE)
    total = block.to(torch.float32) * g
    safe = torch.where(total > 0, total, torch.ones_like(total))
    scaled = torch.where(total.unsqueeze(-1) > 0, w32 / safe.unsqueeze(-1), torch.zeros_like(w32))
    return pack(codes(scaled.reshape(rows, cols))), block, g.contiguous()


def dequantize(packed: torch.Tensor, block: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """W in float32 (…, rows, 2·n) from its three tensors (the reference every widening equals)."""
    values = unpack(packed)
    *lead, rows, cols = values.shape
    # e2m1 · e4m3 is exact in float32 (2 + 4 significant bits), so W rounds once, at the global
    # scale: W is the float32 nearest the exact product, whatever order a reference multiplies in
    local = values.reshape(*lead, rows, cols // BLOCK, BLOCK) * block.to(torch.float32).unsqueeze(-1)
    return (local.reshape(values.shape) * global_scale.to(torch.float32).reshape(*lead, rows, 1)).reshape(values.shape)


def blocked_shape(rows: int, blocks: int) -> tuple[int, int]:
    """The (padded rows, padded block columns) of a swizzled block-scale table."""
    return -(-rows // TILE_ROWS) * TILE_ROWS, -(-blocks // TILE_COLS) * TILE_COLS


def to_blocked(scale: torch.Tensor) -> torch.Tensor:
    """A (rows, blocks) scale table in cuBLAS's 128x4 block-scaling layout (what the FP4 GEMM
    and ComfyUI's files hold), zero-padded to whole tiles, as a (padded rows, padded blocks)
    table: each 128×4 tile is stored as 32 rows of 16 — row r of the tile at (r % 32, 4·(r // 32) + c)."""
    rows, blocks = scale.shape
    prow, pcol = blocked_shape(rows, blocks)
    padded = scale
    if (prow, pcol) != (rows, blocks):
        padded = torch.zeros(prow, pcol, dtype=scale.dtype, device=scale.device)
        padded[:rows, :blocks] = scale
    tiles = padded.view(prow // TILE_ROWS, TILE_ROWS, pcol // TILE_COLS, TILE_COLS).permute(0, 2, 1, 3)
    return tiles.reshape(-1, 4, 32, TILE_COLS).transpose(1, 2).reshape(prow, pcol)


def from_blocked(blocked: torch.Tensor, rows: int, blocks: int) -> torch.Tensor:
    """`to_blocked`'s inverse: the (rows, blocks) table in row order, the padding dropped."""
    prow, pcol = blocked_shape(rows, blocks)
    tiles = blocked.reshape(-1, 32, 4, TILE_COLS).transpose(1, 2)
    plain = tiles.reshape(prow // TILE_ROWS, pcol // TILE_COLS, TILE_ROWS, TILE_COLS).permute(0, 2, 1, 3)
    return plain.reshape(prow, pcol)[:rows, :blocks]


def blocked_rows(blocked: torch.Tensor, rows: int, blocks: int, begin: int, end: int) -> torch.Tensor:
    """Rows [begin, end) of a swizzled table in row order: whole 128-row tiles are unswizzled,
    only the tiles holding those rows (a sharded load reads its rows' tiles, not the table)."""
    first, last = begin // TILE_ROWS, -(-end // TILE_ROWS)
    pcol = blocked_shape(rows, blocks)[1]
    part = blocked[first * TILE_ROWS : last * TILE_ROWS]
    plain = from_blocked(part, (last - first) * TILE_ROWS, pcol)
    return plain[begin - first * TILE_ROWS : end - first * TILE_ROWS, :blocks]
