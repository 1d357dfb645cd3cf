"""The cost of quantized weights on the CPU: one transformer forward with bf16 weights against
the same weights stored in fp8 and widened per layer (quant_compute=dequant), and the W8A8 FP8
GEMM path (quant_compute=fp8, torch._scaled_mm's CPU kernel), in one run, same inputs.

    python -m benchmarks.quant_step                                   # TI2V-5B's block (dim 3072, FFN 14336), 2 layers
    python -m benchmarks.quant_step --layers 1 --tokens 512 --repeats 3
    python -m benchmarks.quant_step --model wan2.2_t2v_a14b --layers 4 --tokens 9440 --device cuda   # a GPU

The layers are Wan's real block shapes with random weights (bf16, diffusers' fp32 modules); the
tokens are a slice of a video's, one CFG half. Every variant runs the same forward
(models.transformer.forward); only the ops namespace and the stored block linears differ.
Printed: median seconds per forward and per layer, and each variant's ratio to bf16. On a GPU
the widening is a memory-bound pass over each weight (half its bf16 bytes read, its bf16
bytes written) beside a compute-bound GEMM; on a CPU both are slow, so the ratio here is an
upper bound on what dequant costs, and fp8 on the CPU runs an unoptimised reference kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch


def _params(cfg, generator):
    from parallel_wan.memory_plan import transformer_shapes
    from parallel_wan.models.transformer import keeps_fp32
    from parallel_wan.weights import tree

    flat = {}
    for name, shape in transformer_shapes(cfg).items():
        t = torch.randn(shape, generator=generator) * (0.02 if len(shape) == 2 else 1.0)
        flat[name] = t if keeps_fp32(name) else t.to(torch.bfloat16)
    return flat, tree


def _quantized(flat, kind):
    from parallel_wan.weights.quantized.form import quantize_rows
    from parallel_wan.weights.quantized.names import quantizable, scale_name

    out = dict(flat)
    for name, t in flat.items():
        if quantizable(name):
            out[name], out[scale_name(name)] = quantize_rows(t, kind)
    return out


def main(argv=None) -> None:
    from parallel_wan.backends.torch import fp8_gemm, ops as torch_ops
    from parallel_wan.models import transformer as dit
    from parallel_wan.models.registry import ARCHITECTURES
    from parallel_wan.models.rope import rope_tables

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="wan2.2_ti2v_5b", choices=sorted(ARCHITECTURES))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--tokens", type=int, default=1024, help="a multiple of 32 (a 32×32-token grid row)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variants", nargs="+", default=["bf16", "dequant", "fp8"])
    p.add_argument("--compile", action="store_true", help="torch.compile each variant's forward (inductor)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU (timed with a sync after each forward)")
    args = p.parse_args(argv)
    device = torch.device(args.device)

    cfg = dataclasses.replace(ARCHITECTURES[args.model].transformer, num_layers=args.layers)
    g = torch.Generator().manual_seed(0)
    flat, tree = _params(cfg, g)
    grid = (args.tokens // 32, 4, 8)
    tokens = torch.randn(1, args.tokens, cfg.in_channels * 4, generator=g).to(torch.bfloat16)
    context = torch.randn(1, cfg.text_len, cfg.text_dim, generator=g).to(torch.bfloat16)
    timestep = torch.tensor([500.0])
    cos, sin = (torch.from_numpy(a) for a in rope_tables(cfg.attention_head_dim, grid))
    tokens, context, timestep, cos, sin = (t.to(device) for t in (tokens, context, timestep, cos, sin))
    quantized = {n: t.to(device) for n, t in _quantized(flat, "fp8").items()}
    flat = {n: t.to(device) for n, t in flat.items()}
    variants = {
        "bf16": (tree.unflatten(flat), torch_ops),
        "dequant": (tree.unflatten(quantized), torch_ops),
        "fp8": (tree.unflatten(quantized), fp8_gemm.ops_for("fp8")),
    }

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def attention(q, k, v):
        return torch_ops.attention(q, k, v)

    times: dict[str, list[float]] = {v: [] for v in args.variants}
    # one compiled forward per variant (the ops namespace differs), so no variant recompiles another's
    forwards = {
        name: torch.compile(dit.forward, dynamic=False) if args.compile else dit.forward for name in args.variants
    }
    with torch.inference_mode():
        for name in args.variants:  # a warm-up forward each (allocator, kernel choice)
            params, ops = variants[name]
            forwards[name](params, tokens, timestep, context, (cos, sin), cfg, ops, attention)
        for _ in range(args.repeats):  # interleaved: other load on a shared machine hits every variant alike
            for name in args.variants:
                params, ops = variants[name]
                sync()
                t0 = time.perf_counter()
                forwards[name](params, tokens, timestep, context, (cos, sin), cfg, ops, attention)
                sync()
                times[name].append(time.perf_counter() - t0)
    print(
        f"{args.model} blocks (dim {cfg.dim}, FFN {cfg.ffn_dim}), {args.layers} layers, {args.tokens} tokens, "
        f"torch {torch.__version__}, "
        f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} CPU threads'}, "
        f"{'compiled, ' if args.compile else ''}median of {args.repeats}"
    )
    base = statistics.median(times["bf16"]) if "bf16" in times else None
    for name, ts in times.items():
        m = statistics.median(ts)
        ratio = f"  ×{m / base:.2f} of bf16" if base else ""
        print(f"  {name:8s} {m:8.3f} s per forward  {m / args.layers:7.3f} s per layer{ratio}")


if __name__ == "__main__":
    main()
