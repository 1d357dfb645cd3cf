"""Device bytes of the transformer weights per rank, per memory mode (resident, sharded, swap)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..config import RunSpec


def _element(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else 4


def tensor_bytes(name: str, shape, dtype: str, quantize: str = "none") -> int:
    """Bytes the loader gives `name` (models.transformer.keeps_fp32's float32 exceptions; under
    quantize=fp8|int8 a block linear's weight is one byte per value plus its float32 scale per
    output row; quantize=nvfp4: half a byte per value, an e4m3 byte per 16 and a float32 global
    scale per row — 0.5625 bytes a weight: weights/quantized/)."""
    from ..models.transformer import keeps_fp32
    from ..weights.quantized.names import quantizable

    if quantize == "nvfp4" and quantizable(name) and len(shape) == 2:
        rows, cols = shape
        return rows * (cols // 2 + cols // 16 + 4)
    if quantize != "none" and quantizable(name) and len(shape) == 2:
        return math.prod(shape) + shape[0] * 4
    return math.prod(shape) * (4 if keeps_fp32(name) else _element(dtype))


@dataclass(frozen=True)
class ExpertBytes:
    whole: int  # one expert, every tensor whole
    block: int  # one block whole (the largest)
    sharded_blocks: int  # this rank's padded dim-0 chunks of every block tensor
    rest: int  # the non-block tensors whole
    rest_chunk: int  # this rank's padded chunk of the non-block tensors (FSDP keeps it as well)
    widened: int = 0  # quantized weights: the largest block linear widened to the run's dtype as it runs


def expert_bytes(shapes: dict, dtype: str, world: int, quantize: str = "none") -> ExpertBytes:
    """Byte counts of one expert on a rank of `world`. Chunks follow FSDP2: dim 0 padded to a
    multiple of the world, ceil(rows / world) rows per rank (a quantized weight's rows carry
    their scales, so its chunk is its rows' bytes as well)."""
    from ..weights.quantized.names import quantizable

    whole = block0 = sharded = rest = rest_chunk = widened = 0
    blocks: dict[str, int] = {}
    for name, shape in shapes.items():
        full = tensor_bytes(name, shape, dtype, quantize)
        if quantize != "none" and quantizable(name):
            widened = max(widened, math.prod(shape) * _element(dtype))
        whole += full
        chunk = full if not shape else full // shape[0] * -(-shape[0] // world)
        if name.startswith("blocks."):
            sharded += chunk
            index = name.split(".")[1]
            blocks[index] = blocks.get(index, 0) + full
        else:
            rest += full
            rest_chunk += chunk
    block0 = max(blocks.values(), default=0)
    return ExpertBytes(whole, block0, sharded, rest, rest_chunk, widened)


def weight_bytes(spec: RunSpec, eb: ExpertBytes) -> dict:
    """Device bytes of the experts per phase (encode, denoise, decode) for spec.memory.mode; with
    quantized weights the denoise phase also holds one widened block linear (`widened`)."""
    out = _weight_bytes(spec, eb)
    if eb.widened:
        out = {
            **out,
            "denoise": out["denoise"] + eb.widened,
            "note": out["note"] + f"; quantize={spec.quantization.quantize}: {_per_weight(spec)}, one layer widened "
            "at a time",
        }
    return out


def _per_weight(spec: RunSpec) -> str:
    if spec.quantization.quantize == "nvfp4":
        return "half a byte per block-linear weight + an e4m3 scale per 16 and a float32 per row (0.56 bytes a weight)"
    return "1 byte per block-linear weight + a float32 scale per row"


def _weight_bytes(spec: RunSpec, eb: ExpertBytes) -> dict:
    experts, world = spec.model.experts, spec.mesh.world_size
    rank_rows = capabilities(spec.execution.backend).sharded_memory == "rank_rows"
    if spec.memory.mode == "sharded" and world > 1 and rank_rows:
        kept = experts * (eb.sharded_blocks + eb.rest_chunk)
        denoise = kept + experts * eb.rest + 2 * eb.block  # block i whole + block i+1 gathering
        return {
            "encode": kept,
            "denoise": denoise,
            "decode": kept + experts * eb.rest,
            "note": f"sharded: 1/{world} of every block per device + non-block weights whole + 2 gathered blocks",
        }
    if (
        spec.memory.mode == "sharded" and world > 1
    ):  # JAX: NamedSharding over every mesh axis, gathered per layer in the scan
        kept = experts * (eb.sharded_blocks + eb.rest_chunk)
        return {
            "encode": kept,
            "denoise": kept + experts * eb.rest + 2 * eb.block,
            "decode": kept,
            "note": f"sharded (jax_fsdp): 1/{world} of each large tensor per device, gathered per layer",
        }
    if spec.memory.mode == "swap" and spec.memory.swap_prefetch_steps == 0:
        # the last high-noise step: block i in use, the block before it not yet released by
        # the forward's loop variable, and the incoming block's copy — one expert + 2 blocks
        return {
            "encode": eb.whole,
            "denoise": eb.whole + 2 * eb.block,
            "decode": eb.whole,
            "note": "swap: one expert; the last high-noise step exchanges them block by block (+2 blocks)",
        }
    if spec.memory.mode == "swap":
        return {
            "encode": eb.whole,
            "denoise": 2 * eb.whole,
            "decode": eb.whole,
            "note": f"swap: one expert, both during the {spec.memory.swap_prefetch_steps} prefetch steps before the "
            "switch",
        }
    return {
        "encode": experts * eb.whole,
        "denoise": experts * eb.whole,
        "decode": experts * eb.whole,
        "note": "resident: every expert whole on every device",
    }
