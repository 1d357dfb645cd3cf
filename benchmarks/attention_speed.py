"""Every local attention kernel at one shape, timed and checked against the exact reference.

    python -m benchmarks.attention_speed                        # one GPU: A14B 720p × 81 on one GPU
    python -m benchmarks.attention_speed --dry-run              # CPU, tiny shape: the code path

The GPU default is the one-GPU self-attention of T2V-A14B at 720p × 81: 75,600 tokens, 40 heads ×
128, bf16, no padding. Per kernel: milliseconds (median), TFLOP/s (4·S·L·H·D: the two products,
the same FLOPs for every kernel, so the ratio is a speed-up), the ratio to the reference kernel
(cuDNN on CUDA — what auto runs on Hopper and Blackwell —, PyTorch's CPU flash kernel on CPU) and
the output's relative L2 distance from the reference's output and the lse's largest gap. The
fp32 math kernel is left out on CUDA (it materialises the scores: ~900 GB at this shape).
Kernels that refuse the inputs (not installed, not built for this GPU) are listed with why.

Then the block-sparse kernel (sparse=radial: backends/torch/sparse_kernel.py) with Radial
Attention's mask for the same video (A14B 720p × 81: 21 latent frames of 45 × 80 tokens) at its
default decay and at denser and sparser ones: its density (the share of blocks it visits), its
time, and its TFLOP/s-equivalent — the dense FLOPs over its time, so it compares with the dense
kernels' rows directly — and its distance from the dense reference (a sparse mask changes the
result: on random inputs, whose attention is near uniform, by about the output's own size; a
quality figure needs a real model's activations and prompts). At 720p Radial's mask visits
35.4 % of the blocks at decay 0.8 (38.9 % at 1.0, 31.5 % at 0.6); at the dry run's small grid
the decay changes nothing. Then sparse=svg's whole call (backends/torch/svg_attention.py: the
64-query profile of every head, the placement gathers, the same kernel over its band, the
gathers back) at its default density 0.3 and at 0.15 — 34.1 % and 19.7 % of the blocks at 720p
(parallel/svg_mask.py) — with the share of heads the profile made temporal.
"""

from __future__ import annotations

import argparse
import json
import statistics

GPU_SHAPE = {"tokens": 75_600, "heads": 40, "head_dim": 128, "dtype": "bfloat16", "grid": (21, 45, 80), "block": 64}
CPU_SHAPE = {"tokens": 512, "heads": 4, "head_dim": 64, "dtype": "float32", "grid": (8, 8, 8), "block": 16}
DECAYS = (0.8, 1.0, 0.6)  # Radial's default decay factor first; larger is denser
DENSITIES = (0.3, 0.15)  # sparse=svg's default density first
REFERENCE = {"cuda": "cuda_cudnn", "cpu": "cpu_flash"}


def kernel_speeds(device, tokens: int, heads: int, head_dim: int, dtype, warmup: int, iters: int, names=None) -> dict:
    """{"shape": …, "reference": name, "rows": [{kernel, ms, tflops, vs_reference, out_rel,
    lse_max_abs} | {kernel, error}]} for every registered kernel (or `names`)."""
    import torch

    from benchmarks.matmul_peak import time_call
    from parallel_wan.backends.torch import attention, kernels

    device = torch.device(device)
    gen = torch.Generator(device).manual_seed(0)
    q, k, v = (torch.randn(1, tokens, heads, head_dim, generator=gen, device=device).to(dtype) for _ in range(3))
    flops = 4 * tokens * tokens * heads * head_dim
    reference = REFERENCE.get(device.type, "math")
    ref_out, ref_lse = attention.attention_with_lse(q, k, v, kernel=reference)
    rows = []
    for name in names or kernels.names():
        if name == "math" and device.type == "cuda":
            continue
        try:
            out, lse = attention.attention_with_lse(q, k, v, kernel=name)
            times = time_call(lambda: attention.attention_with_lse(q, k, v, kernel=name), device, warmup, iters)
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, NotImplementedError, ImportError) as exc:
            rows.append({"kernel": name, "error": str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__})
            continue
        seconds = statistics.median(times)
        rows.append(
            {
                "kernel": name,
                "exact": kernels.kernel(name).exact,
                "ms": 1e3 * seconds,
                "tflops": flops / seconds / 1e12,
                "out_rel": float((out.double() - ref_out.double()).norm() / ref_out.double().norm()),
                "lse_max_abs": float((lse.double() - ref_lse.double()).abs().max()),
            }
        )
        del out, lse
    ref_ms = next((r["ms"] for r in rows if r["kernel"] == reference and "ms" in r), None)
    for r in rows:
        if "ms" in r and ref_ms:
            r["vs_reference"] = ref_ms / r["ms"]  # > 1: faster than the reference
    return {
        "shape": {"batch": 1, "tokens": tokens, "heads": heads, "head_dim": head_dim, "dtype": str(dtype)[6:]},
        "flops_per_call": flops,
        "reference": reference,
        "rows": rows,
    }


def sparse_speeds(device, shape: dict, dtype, warmup: int, iters: int) -> dict:
    """The block-sparse kernel at `shape` (its grid and block) per radial decay factor and per
    svg density (its whole call): density, time, TFLOP/s-equivalent, distance from dense. On a
    device the kernel does not run on (CPU outside the interpreter) the torch path runs: its
    rows say which."""
    import torch

    from benchmarks.matmul_peak import time_call
    from parallel_wan.backends.torch import attention
    from parallel_wan.backends.torch.sparse_attention import SparseAttention, uses_triton
    from parallel_wan.backends.torch.svg_attention import SpatioTemporalAttention
    from parallel_wan.parallel.block_visits import BlockMask
    from parallel_wan.parallel.radial_mask import radial_mask
    from parallel_wan.parallel.svg_mask import svg_mask

    device = torch.device(device)
    tokens, heads, head_dim = shape["tokens"], shape["heads"], shape["head_dim"]
    gen = torch.Generator(device).manual_seed(0)
    q, k, v = (torch.randn(1, tokens, heads, head_dim, generator=gen, device=device).to(dtype) for _ in range(3))
    dense, _ = attention.attention_with_lse(q, k, v, kernel=REFERENCE.get(device.type, "math"))
    flops = 4 * tokens * tokens * heads * head_dim
    rows = []
    frame_tokens = shape["grid"][1] * shape["grid"][2]
    masks = [
        ("radial", "decay_factor", decay, radial_mask(tokens, shape["grid"], shape["block"], decay)) for decay in DECAYS
    ]
    masks += [("svg", "density", d, svg_mask(tokens, frame_tokens, shape["block"], d)) for d in DENSITIES]
    for kind, knob, value, block_mask in masks:
        mask = BlockMask(block_mask, shape["block"], tokens)
        sparse = SparseAttention(mask) if kind == "radial" else SpatioTemporalAttention(mask, tuple(shape["grid"]))
        sparse.start_step(True)

        def call(sparse=sparse):
            sparse._layer = 0  # every call is the step's first sparse block
            return sparse(q, k, v, 0, 0, tokens)

        out, _ = call()
        seconds = statistics.median(time_call(call, device, warmup, iters))
        temporal = {}
        if kind == "svg":
            counts = sparse.layout_counts().tolist()
            temporal = {"temporal_head_fraction": counts[0] / max(counts[1], 1)}
        rows.append(
            {
                "mask": kind,
                knob: value,
                **temporal,
                "block": shape["block"],
                "block_density": mask.block_density(),
                "ms": 1e3 * seconds,
                "tflops_equivalent": flops / seconds / 1e12,
                "out_rel_to_dense": float((out.double() - dense.double()).norm() / dense.double().norm()),
                "path": "triton" if uses_triton(q) else "torch (no Triton here)",
            }
        )
    return {"grid": list(shape["grid"]), "rows": rows}


def sparse_markdown(result: dict) -> list[str]:
    lines = [
        f"Block-sparse attention (sparse=radial and sparse=svg, grid {result['grid']}), TFLOP/s-equivalent = "
        "dense FLOPs / time (svg: its whole call, profile and placement included):",
        "",
        "| mask | block | density | ms | TFLOP/s-equivalent | out rel. to dense | path |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        if r["mask"] == "radial":
            name = f"radial, decay {r['decay_factor']}"
        else:
            name = f"svg, density {r['density']} ({r['temporal_head_fraction']:.0%} of heads temporal)"
        lines.append(
            f"| {name} | {r['block']} | {r['block_density']:.3f} | {r['ms']:.4g} "
            f"| {r['tflops_equivalent']:.4g} | {r['out_rel_to_dense']:.2e} | {r['path']} |"
        )
    return lines


def markdown(result: dict) -> list[str]:
    s = result["shape"]
    lines = [
        f"Attention kernels at {s['tokens']:,} tokens × {s['heads']} heads × {s['head_dim']}, {s['dtype']} "
        f"(against `{result['reference']}`):",
        "",
        "| kernel | ms | TFLOP/s | × reference | out rel. to reference | lse max gap |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['kernel']} | refused: {r['error']} | — | — | — | — |")
        else:
            ratio = f"{r['vs_reference']:.2f}×" if "vs_reference" in r else "—"
            lines.append(
                f"| {r['kernel']} | {r['ms']:.4g} | {r['tflops']:.4g} | {ratio} | {r['out_rel']:.2e} "
                f"| {r['lse_max_abs']:.2e} |"
            )
    return lines


def main(argv=None) -> dict:
    import torch

    p = argparse.ArgumentParser(prog="python -m benchmarks.attention_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="CPU, a tiny shape")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tokens", type=int)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    args = p.parse_args(argv)
    shape = dict(CPU_SHAPE if args.dry_run else GPU_SHAPE)
    if args.tokens:
        shape["tokens"] = args.tokens
    result = kernel_speeds(
        "cpu" if args.dry_run else args.device,
        shape["tokens"],
        shape["heads"],
        shape["head_dim"],
        getattr(torch, shape["dtype"]),
        args.warmup,
        args.iters,
    )
    result["sparse"] = sparse_speeds(
        "cpu" if args.dry_run else args.device, shape, getattr(torch, shape["dtype"]), args.warmup, args.iters
    )
    print("\n".join(markdown(result) + [""] + sparse_markdown(result["sparse"])))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
