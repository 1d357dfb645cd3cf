"""The matmul throughput this device reaches, measured: the denominator of MFU.

A datasheet peak (H100 SXM bf16 dense: 989 TFLOP/s) is never reached by any GEMM, and clocks,
power caps and MIG slices move the real ceiling, so `benchmarks/step.py` measures it in the
same run as the model: the best of a few large GEMMs and of the model's own GEMM shapes.

    python -m benchmarks.matmul_peak                          # CUDA, bfloat16, the default shapes
    python -m benchmarks.matmul_peak --device cpu --dtype float32 --shapes 256,256,256
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

# (M, K, N): square GEMMs large enough to saturate any current GPU.
DEFAULT_SHAPES = ((8192, 8192, 8192), (16384, 8192, 8192), (8192, 16384, 8192))


def time_call(fn, device: torch.device, warmup: int, iters: int) -> list[float]:
    """Seconds per call, `iters` calls after `warmup`; CUDA calls are timed with events (the
    GPU's own clock), so host-side launch time is not counted as long as the queue stays fed."""
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return times


def gemm_tflops(m: int, k: int, n: int, device, dtype, warmup: int = 3, iters: int = 10) -> float:
    """Best TFLOP/s of (m × k) @ (k × n) over `iters` calls."""
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    out = torch.empty(m, n, device=device, dtype=dtype)
    seconds = time_call(lambda: torch.matmul(a, b, out=out), device, warmup, iters)
    return 2 * m * k * n / min(seconds) / 1e12


def fp8_gemm_tflops(m: int, k: int, n: int, device, warmup: int = 3, iters: int = 10) -> dict:
    """Best TFLOP/s of an e4m3 (m × k) @ (k × n) through torch._scaled_mm (per-tensor scales,
    bf16 out: what an FP8 linear layer runs), and its relative error against the fp32 product
    of the unquantized operands (e4m3 keeps 3 mantissa bits: ~2^-4 per element, averaging to
    a few % over k)."""
    device = torch.device(device)
    a, b = torch.randn(m, k, device=device), torch.randn(n, k, device=device)
    fp8 = torch.float8_e4m3fn
    sa, sb = (x.abs().max() / torch.finfo(fp8).max for x in (a, b))
    qa, qb = (a / sa).to(fp8), (b / sb).to(fp8)
    sa, sb = sa.reshape(1, 1).float(), sb.reshape(1, 1).float()

    def gemm():
        return torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    exact = a @ b.t()
    rel = float((gemm().double() - exact.double()).norm() / exact.double().norm())
    seconds = time_call(gemm, device, warmup, iters)
    return {"m": m, "k": k, "n": n, "tflops": 2 * m * k * n / min(seconds) / 1e12, "rel_err_vs_fp32": rel}


def measure_peak(device, dtype, shapes=DEFAULT_SHAPES, warmup: int = 3, iters: int = 10) -> dict:
    """{'peak_tflops': best over shapes, 'shapes': [(m, k, n, tflops), …]}."""
    device = torch.device(device)
    rows = [(m, k, n, gemm_tflops(m, k, n, device, dtype, warmup, iters)) for m, k, n in shapes]
    return {
        "peak_tflops": max(r[3] for r in rows),
        "median_tflops": statistics.median(r[3] for r in rows),
        "shapes": rows,
    }


def parse_shapes(texts: list[str]) -> list[tuple[int, int, int]]:
    shapes = []
    for text in texts:
        parts = text.split(",")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise SystemExit(f"--shapes {text!r}: give each GEMM as M,K,N (three integers), e.g. 8192,8192,8192")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--shapes", nargs="+", default=[",".join(map(str, s)) for s in DEFAULT_SHAPES])
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            f"--device {args.device}: this machine has no CUDA device (torch {torch.__version__}); "
            "run on a GPU or pass --device cpu"
        )
    result = measure_peak(args.device, getattr(torch, args.dtype), parse_shapes(args.shapes), iters=args.iters)
    print("| M | K | N | TFLOP/s |\n|---|---|---|---|")
    for m, k, n, t in result["shapes"]:
        print(f"| {m} | {k} | {n} | {t:.1f} |")
    print(f"\npeak (best shape): {result['peak_tflops']:.1f} TFLOP/s, {args.dtype}, {args.device}")


if __name__ == "__main__":
    main()
