"""The block's elementwise ops fused (backends/torch/fused_kernels.py) against the unfused ops
they replace (models/elementwise.py on torch's eager kernels), at one GPU's A14B 720p × 81 rows.

    python -m benchmarks.elementwise               # one GPU: 75,600 tokens × 5120, bf16
    python -m benchmarks.elementwise --dry-run     # CPU, tiny rows: the unfused ops only

Per op: milliseconds (median) fused and unfused, the speed-up, and the fused kernel's memory
rate (the bytes it must move — its inputs once, its output once — over its time), the figure to
hold against the GPU's memory bandwidth. The fused kernels need CUDA (the dry run records why
they did not run).
"""

from __future__ import annotations

import argparse
import json
import statistics

GPU_ROWS = {"tokens": 75_600, "heads": 40, "head_dim": 128, "dtype": "bfloat16"}
CPU_ROWS = {"tokens": 64, "heads": 4, "head_dim": 16, "dtype": "float32"}


def op_speeds(device, tokens: int, heads: int, head_dim: int, dtype, warmup: int, iters: int) -> dict:
    import torch

    from benchmarks.matmul_peak import time_call
    from parallel_wan.backends.torch import ops
    from parallel_wan.models import elementwise

    device = torch.device(device)
    dim = heads * head_dim
    gen = torch.Generator(device).manual_seed(0)
    x, y = (torch.randn(1, tokens, dim, generator=gen, device=device).to(dtype) for _ in range(2))
    scale, shift, gate = (torch.randn(1, 1, dim, generator=gen, device=device) for _ in range(3))
    weight = torch.ones(dim, device=device, dtype=dtype)
    angles = torch.randn(tokens, head_dim // 2, generator=gen, device=device)
    cos, sin = angles.cos(), angles.sin()
    row = x.element_size() * tokens * dim
    cases = {  # name → (unfused call, fused op name and its arguments, bytes the fused kernel moves)
        "norm_modulate": (
            lambda: elementwise.norm_modulate(x, scale, shift, 1e-6, ops),
            (x, scale, shift, 1e-6),
            2 * row,
        ),
        "gated_residual": (lambda: elementwise.gated_residual(x, y, gate, ops), (x, y, gate), 3 * row),
        "rms_norm_rope": (
            lambda: elementwise.rms_norm_rope(x, weight, 1e-6, heads, cos, sin, ops),
            (x, weight, 1e-6, heads, cos, sin),
            2 * row + 8 * tokens * head_dim // 2,
        ),
    }
    rows = []
    for name, (unfused, args, moved) in cases.items():
        entry = {"op": name, "unfused_ms": 1e3 * statistics.median(time_call(unfused, device, warmup, iters))}
        if device.type == "cuda":
            from parallel_wan.backends.torch import fused_kernels

            fused = getattr(fused_kernels, name)
            seconds = statistics.median(time_call(lambda f=fused, a=args: f(*a), device, warmup, iters))
            entry |= {"fused_ms": 1e3 * seconds, "speedup": entry["unfused_ms"] / (1e3 * seconds)}
            entry["fused_gbps"] = moved / seconds / 1e9
        else:
            entry["fused"] = "not run: the fused kernels run on CUDA (tests run them in Triton's interpreter)"
        rows.append(entry)
    return {"rows_shape": [1, tokens, dim], "dtype": str(dtype)[6:], "ops": rows}


def markdown(result: dict) -> list[str]:
    b, tokens, dim = result["rows_shape"]
    lines = [
        f"The block's elementwise ops at {tokens:,} tokens × {dim}, {result['dtype']}, per call:",
        "",
        "| op | unfused ms | fused ms | speed-up | fused GB/s |",
        "|---|---|---|---|---|",
    ]
    for r in result["ops"]:
        if "fused_ms" in r:
            lines.append(
                f"| {r['op']} | {r['unfused_ms']:.3g} | {r['fused_ms']:.3g} | {r['speedup']:.2f}× "
                f"| {r['fused_gbps']:.4g} |"
            )
        else:
            lines.append(f"| {r['op']} | {r['unfused_ms']:.3g} | — | — | — |")
    return lines


def main(argv=None) -> dict:
    import torch

    p = argparse.ArgumentParser(prog="python -m benchmarks.elementwise", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args(argv)
    shape = CPU_ROWS if args.dry_run else GPU_ROWS
    result = op_speeds(
        "cpu" if args.dry_run else args.device,
        shape["tokens"],
        shape["heads"],
        shape["head_dim"],
        getattr(torch, shape["dtype"]),
        args.warmup,
        args.iters,
    )
    print("\n".join(markdown(result)))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
