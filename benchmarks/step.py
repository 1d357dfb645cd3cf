"""One rank's transformer forward at real Wan 2.2 dimensions on one GPU: time, TFLOP/s, MFU,
and diffusers' WanTransformer3DModel on the same weights and shapes in the same run.

What runs: the rank of a mesh preset (conf/mesh/NAME.yaml) holding Lc = ⌈N / cp⌉ of the N
tokens, with both CFG halves batched (one under CFG parallel, dp = 2); its self-attention is the
production sequence-parallel code with the collectives replaced by local copies
(benchmarks/loopback.py), so the GPU does exactly one rank's compute. Weights are random,
initialised on the device (no checkpoint needed), in bf16 with diffusers' fp32 modules; as many
layers as fit beside the diffusers model that shares them (`--layers auto`), and every figure is
also given per layer and scaled to the model's depth. MFU is against the best bf16 GEMM measured
in the same run (benchmarks/matmul_peak.py); FLOPs are analytic (parallel_wan/measure/flops.py).

    python -m benchmarks.step --model a14b --resolution 720p --mesh ulysses8     # the issue-7 target
    python -m benchmarks.step --model a14b --resolution 720p --mesh cp8
    python -m benchmarks.step --model 5b --resolution 704p --mesh ulysses8
    python -m benchmarks.step --model tiny --grid 2 4 8 --mesh cp2 --device cpu --dtype float32   # CPU smoke

Before timing, the run checks that the variants compute the same function (ours eager vs
diffusers, fused vs unfused q/k/v, compiled vs eager) and stops with the numbers if not.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import platform
import statistics
import sys
import warnings

import torch

from parallel_wan.backends.torch import attention as attention_kernels, kernels, ops
from parallel_wan.backends.torch.qkv_fusion import fuse_qkv
from parallel_wan.backends.torch.runners import CompiledRunner, Compiler, ResidentRunner
from parallel_wan.backends.torch.ulysses import check_heads
from parallel_wan.measure.flops import forward_flops
from parallel_wan.models import transformer as dit
from parallel_wan.models.rope import rope_tables
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.weights.tree import unflatten

from .comm_volume import batch_per_rank, load_preset, local_tokens
from .loopback import diffusers_attention, rank_attention
from .matmul_peak import measure_peak, time_call

MODELS = {
    "a14b": TransformerConfig(),  # T2V-A14B (I2V differs only in in_channels 36)
    "5b": TransformerConfig(num_attention_heads=24, ffn_dim=14336, num_layers=30, in_channels=48, out_channels=48),
    "tiny": TransformerConfig(
        num_attention_heads=4, attention_head_dim=16, ffn_dim=128, num_layers=2, text_dim=32, freq_dim=32
    ),
}
# Token grids (latent frames, height/2, width/2) of the published resolutions (720p×81, 480p×81, 704×1280×121).
RESOLUTIONS = {"720p": (21, 45, 80), "480p": (21, 30, 52), "704p": (31, 22, 40)}
# Its fast ones (the memory-efficient kernel is slower than all of these on Hopper).
DIFFUSERS_BACKENDS_CUDA = ("_flash_3", "flash", "_native_cudnn", "_native_flash", "native")
# Agreement required between variants before anything is timed. fp32: reduction order only
# (measured ~1e-7 at tiny sizes). bf16: each GEMM rounds its output to 8 bits of mantissa
# (2^-9 relative) and the two models round at different points; over many layers of random
# weights this stays near 1e-2, while a wrong cast, rope or layout is O(1).
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 2e-2}
# Marks diffusers' self-attention calls for the loopback wrapper (see `diffusers_loopback`).
_SELF_ATTENTION = object()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


# ---------------------------------------------------------------- shapes
def rank_grid(tokens: int, limit: int) -> tuple[int, int, int]:
    """A (frames, height, width) token grid holding exactly `tokens` tokens, each side ≤ limit
    (the RoPE table length): diffusers takes a video latent, so the rank's Lc tokens are
    presented as a small video of that many patches. The grid changes RoPE angles, not cost."""
    divisors = [d for d in range(1, tokens + 1) if tokens % d == 0]
    for f in sorted(divisors, key=lambda d: abs(d - round(tokens ** (1 / 3)))):
        rest = tokens // f
        hs = [h for h in divisors if rest % h == 0 and h <= limit and rest // h <= limit]
        if f <= limit and hs:
            h = min(hs, key=lambda d: abs(d - math.isqrt(rest)))
            return f, h, rest // h
    raise SystemExit(
        f"{tokens:,} tokens per rank cannot be laid out as a video of ≤ {limit} patches per side; "
        "pick a mesh whose cp gives another local token count"
    )


# ---------------------------------------------------------------- models
def build_diffusers(cfg: TransformerConfig, layers: int, dtype: torch.dtype, device: torch.device, seed: int):
    """diffusers' model with `layers` blocks and random weights, made on the meta device and
    materialised on `device` in `dtype` (fp32 for diffusers' `_keep_in_fp32_modules`, which are
    ours too), so 14B parameters are never built on the host."""
    from diffusers import WanTransformer3DModel
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed
    from diffusers.utils import logging as diffusers_logging

    # It warns that `.to(dtype)` casts its fp32 modules; they are put back to fp32 just below.
    diffusers_logging.set_verbosity_error()
    with torch.device("meta"):
        model = WanTransformer3DModel(**dataclasses.replace(cfg, num_layers=layers).to_diffusers())
    model = model.to(dtype)
    for name, p in model.named_parameters():
        if dit.keeps_fp32(name):
            p.data = p.data.float()
    model = model.to_empty(device=device).eval().requires_grad_(False)
    # RoPE tables are computed buffers, not weights: rebuild them (meta left them empty).
    model.rope = WanRotaryPosEmbed(cfg.attention_head_dim, cfg.patch_size, cfg.rope_max_seq_len).to(device)
    gen = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(generator=gen)
            if name.endswith("scale_shift_table"):
                p.mul_(cfg.dim**-0.5)  # as diffusers initialises it: small modulation
            elif p.ndim == 1 and "norm" in name and name.endswith("weight"):
                p.mul_(0.1).add_(1.0)  # norm scales near 1, not all 1 (a swapped name must show)
            elif p.ndim == 1:
                p.mul_(0.02)
            else:
                p.mul_(math.prod(p.shape[1:]) ** -0.5)  # unit-variance activations through every GEMM
    return model


def layers_that_fit(cfg: TransformerConfig, rows: int, lc: int, dtype: torch.dtype, device: torch.device) -> int:
    """How many layers of weights (diffusers' copy, shared with ours, plus our fused q/k/v)
    fit in free device memory next to the activations of the largest variant."""
    if device.type != "cuda":
        return min(2, cfg.num_layers)
    e = torch.finfo(dtype).bits // 8
    d, f = cfg.dim, cfg.ffn_dim
    per_layer = e * (8 * d * d + 2 * d * f + 3 * d * d)  # attn1 + attn2 + ffn, plus to_qkv
    # Live activations of one block at a time (hidden states, q/k/v and the fp32 attention
    # partials, the FFN's hidden layer), twice over for headroom, plus allocator slack.
    reserve = 2 * rows * lc * (12 * d * 4 + 2 * f * e) + (6 << 30)
    torch.cuda.empty_cache()  # cached blocks count as used in mem_get_info
    free = torch.cuda.mem_get_info(device)[0]
    fit = (free - reserve) // per_layer
    if fit < 1:
        raise SystemExit(
            f"one layer ({per_layer / 2**30:.1f} GiB) does not fit beside {reserve / 2**30:.1f} GiB of "
            f"activations in {free / 2**30:.1f} GiB free; pick a mesh with fewer tokens per rank, "
            "or pass --layers N to override the estimate"
        )
    return int(min(cfg.num_layers, fit))


class diffusers_loopback:
    """Within the block, diffusers' self-attention calls go through the same loopback
    exchange as ours (benchmarks/loopback.py): marked processors only, cross-attention as is."""

    def __init__(self, model, ulysses: int, ring: int, valid_tokens: int):
        from diffusers.models.transformers import transformer_wan

        self.module, self.model = transformer_wan, model
        self.ulysses, self.ring, self.valid = ulysses, ring, valid_tokens

    def set_backend(self, name: str) -> None:
        # diffusers refuses backends without context-parallel support while a processor has a
        # parallel config: clear the marks, switch, mark again.
        self._mark(None)
        self.model.set_attention_backend(name)
        self._mark(_SELF_ATTENTION)

    def _mark(self, value) -> None:
        for block in self.model.blocks:
            block.attn1.processor._parallel_config = value

    def __enter__(self):
        original = self.original = self.module.dispatch_attention_fn

        def dispatch(query, key, value, *args, parallel_config=None, **kwargs):
            if parallel_config is not _SELF_ATTENTION:
                return original(query, key, value, *args, parallel_config=parallel_config, **kwargs)
            attend = lambda q, k, v: original(q, k, v, *args, parallel_config=None, **kwargs)  # noqa: E731
            return diffusers_attention(self.ulysses, self.ring, self.valid, attend)(query, key, value)

        self.module.dispatch_attention_fn = dispatch
        self._mark(_SELF_ATTENTION)
        return self

    def __exit__(self, *exc):
        self.module.dispatch_attention_fn = self.original
        self._mark(None)


# ---------------------------------------------------------------- measurements
def count_host_syncs(fn, device: torch.device) -> tuple[int, list[str]] | None:
    """Synchronising CUDA calls (D2H copies, pageable H2D copies, .item()) one call of `fn`
    makes, from PyTorch's sync debug mode; None off CUDA."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize(device)
    found = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower()]
    return len(found), found[:3]


def host_enqueue_seconds(fn, device: torch.device) -> float | None:
    """Host time to issue one call without waiting for the GPU: when it is well under the GPU
    time, the queue never runs dry and CUDA graphs cannot speed the call up."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    t0 = __import__("time").perf_counter()
    fn()
    t = __import__("time").perf_counter() - t0
    torch.cuda.synchronize(device)
    return t


def attention_kernel_table(rows, lc, cfg, ulysses, ring, valid, dtype, device, warmup, iters) -> list[dict]:
    """Each local attention kernel (with log-sum-exp) at this rank's per-hop shape."""
    heads, length = cfg.num_attention_heads // ulysses, ulysses * lc
    q, k, v = (torch.randn(rows, length, heads, cfg.attention_head_dim, device=device, dtype=dtype) for _ in range(3))
    keys = min(length, valid)
    flops = 4 * rows * length * keys * heads * cfg.attention_head_dim
    out = []
    for name in attention_kernels.KernelChoice().candidates(q):
        if name == "math" and device.type == "cuda":
            continue  # materialises the score matrix: tens of GB at these shapes
        try:
            times = time_call(
                lambda: attention_kernels.attention_with_lse(q, k, v, valid_keys=keys, kernel=name),
                device,
                warmup,
                iters,
            )
        except (RuntimeError, NotImplementedError, ImportError) as exc:
            out.append({"kernel": name, "error": str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})
            continue
        out.append(
            {"kernel": name, "seconds": statistics.median(times), "tflops": flops / statistics.median(times) / 1e12}
        )
    return out


def with_kernel(choice, name: str, fn):
    """`fn` with the local attention kernel `name` tried first by `choice` (the
    `KernelChoice` its attention was made with: `KernelChoice.prefer`), then the default order
    restored; a kernel that refuses the inputs falls through to the next, so `kernels_used` in
    the results says what ran."""

    def call():
        choice.prefer(name)
        try:
            out = fn()
            call.ran = sorted(set(choice.chosen().values()))
            return out
        finally:
            choice.prefer(None)

    call.ran = []
    return call


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return f"{p.name} (sm_{p.major}{p.minor}, {p.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


# ---------------------------------------------------------------- the run
def run(args) -> dict:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            f"--device {args.device}: no CUDA device here (torch {torch.__version__}); run on a GPU, "
            "or pass --device cpu with --model tiny for the smoke run"
        )
    if device.type == "cpu" and args.model != "tiny":
        raise SystemExit(f"--model {args.model} on CPU would take hours per forward; use --model tiny on CPU")
    if args.cuda_graphs and device.type != "cuda":
        raise SystemExit("--cuda-graphs needs --device cuda")
    dtype = getattr(torch, args.dtype)
    cfg = MODELS[args.model]
    spec = load_preset(args.mesh)
    try:
        check_heads(cfg.num_attention_heads, spec.ulysses)
    except ValueError as exc:
        raise SystemExit(f"--mesh {args.mesh} with --model {args.model}: {exc}") from None
    grid = tuple(args.grid) if args.grid else RESOLUTIONS[args.resolution]
    n = math.prod(grid)
    lc, rows = local_tokens(n, spec), batch_per_rank(spec)
    lgrid = rank_grid(lc, cfg.rope_max_seq_len)
    layers = layers_that_fit(cfg, rows, lc, dtype, device) if args.layers == "auto" else int(args.layers)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        # "--device cuda" names no index, which set_device refuses (seen on an H200, torch 2.11)
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False  # bf16 run: fp32 parts stay true fp32, as the reference

    peak = measure_peak(
        device,
        dtype,
        [tuple(s) for s in args.peak_shapes]
        if args.peak_shapes
        else [
            (8192, 8192, 8192),
            (16384, 8192, 8192),
            (rows * lc, cfg.dim, 3 * cfg.dim),
            (rows * lc, cfg.dim, cfg.ffn_dim),
        ],
        iters=args.iters,
    )
    model = build_diffusers(cfg, layers, dtype, device, args.seed)
    params = unflatten(model.state_dict())  # the same storage as the diffusers model
    fused = fuse_qkv(params)

    pt, ph, pw = cfg.patch_size
    latent = torch.randn(rows, cfg.in_channels, lgrid[0] * pt, lgrid[1] * ph, lgrid[2] * pw, device=device, dtype=dtype)
    tokens = dit.patchify(latent, cfg.patch_size, ops)
    timestep = torch.full((rows,), 900.0, device=device)
    context = torch.randn(rows, cfg.text_len, cfg.text_dim, device=device, dtype=dtype)
    cos, sin = rope_tables(cfg.attention_head_dim, lgrid)
    rope = (torch.as_tensor(cos, device=device), torch.as_tensor(sin, device=device))
    flops = forward_flops(cfg, lc, rows=rows, key_tokens=n, layers=layers)

    results: dict = {"variants": {}, "errors": {}}
    with torch.inference_mode(), diffusers_loopback(model, spec.ulysses, spec.ring, n) as dl:
        choice = attention_kernels.KernelChoice()  # our attention's kernel choice, auto's
        attention = rank_attention(spec.ulysses, spec.ring, n, lc, choice)

        def ours(tree, runner=None, attend=attention):
            return lambda: dit.forward(tree, tokens, timestep, context, rope, cfg, ops, attend, runner)

        variants = {"ours eager, q/k/v separate": ours(params), "ours eager, fused q/k/v": ours(fused)}
        if args.compile:  # the run's compile=true: runners/compiled.py over the resident runner
            compiler = Compiler(args.compile_backend)
            variants["ours compiled, fused q/k/v"] = ours(
                fused, CompiledRunner(ResidentRunner(), compiler), compiler.attention(attention)
            )
        for kernel in args.kernels or ():  # the ring's local kernel forced (Ulysses alone calls SDPA)
            variants[f"ours eager, fused q/k/v, kernel {kernel}"] = with_kernel(choice, kernel, ours(fused))
        if args.cuda_graphs:
            compiler = Compiler(cuda_graphs=True)
            variants["ours compiled + CUDA graphs"] = ours(
                fused, CompiledRunner(ResidentRunner(), compiler), compiler.attention(attention)
            )

        def diffusers_forward():
            return model(latent, timestep, context, return_dict=False)[0]

        backends = DIFFUSERS_BACKENDS_CUDA if device.type == "cuda" else ("native",)
        if args.diffusers_backends:
            backends = tuple(args.diffusers_backends)

        # --- agreement before timing
        reference = variants["ours eager, q/k/v separate"]()
        # the default choice, before a --kernels variant forces another
        kernels_used = {f"{k[0]} {str(k[1]).replace('torch.', '')} d={k[2]}": v for k, v in choice.chosen().items()}
        if not torch.isfinite(reference).all():
            raise SystemExit("our forward produced non-finite values; the random weights or a kernel are broken")
        tol = args.tolerance or TOLERANCE[args.dtype]
        checks = {}
        for name, fn in list(variants.items())[1:]:
            try:
                checks[name] = rel_err(fn(), reference)
            except Exception as exc:  # a variant that cannot run is reported, not fatal
                results["errors"][name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                del variants[name]
        diffusers_ok = []
        for backend in backends:
            try:
                dl.set_backend(backend)
                out = dit.patchify(diffusers_forward(), cfg.patch_size, ops)
            except Exception as exc:
                results["errors"][f"diffusers {backend}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                continue
            checks[f"diffusers {backend}"] = rel_err(out, reference)
            diffusers_ok.append(backend)
        results["agreement"] = checks
        bad = {k: v for k, v in checks.items() if not v <= tol}
        if bad:
            raise SystemExit(
                f"variants disagree with our eager forward beyond {tol:g} (rel. error): {bad}; "
                "a fast path computes something else — nothing was timed"
            )
        if not diffusers_ok and not args.no_diffusers:
            raise SystemExit(f"no diffusers attention backend ran: {results['errors']}")
        if device.type == "cuda" and "math" in kernels_used.values():
            raise SystemExit(
                f"our attention fell back to the fp32 math kernel on CUDA ({kernels_used}); "
                "the timing would be meaningless. Check the CUDA/cuDNN build or install flash-attn"
            )

        # --- timing
        for name, fn in variants.items():
            results["variants"][name] = time_call(fn, device, args.warmup, args.iters)
        if not args.no_diffusers:
            for backend in diffusers_ok:
                dl.set_backend(backend)
                results["variants"][f"diffusers {backend}"] = time_call(
                    diffusers_forward, device, args.warmup, args.iters
                )
        results["kernel_variants_ran"] = {k: getattr(fn, "ran", None) for k, fn in variants.items() if "kernel " in k}
        fastest_ours = min((k for k in variants), key=lambda k: statistics.median(results["variants"][k]))
        results["syncs"] = count_host_syncs(variants[fastest_ours], device)
        results["enqueue_s"] = host_enqueue_seconds(variants[fastest_ours], device)
        results["attention_kernels"] = (
            attention_kernel_table(rows, lc, cfg, spec.ulysses, spec.ring, n, dtype, device, args.warmup, args.iters)
            if not args.no_kernel_table
            else []
        )
    results.update(
        command="python -m benchmarks.step " + " ".join(sys.argv[1:] if args.argv is None else args.argv),
        date=datetime.datetime.now().astimezone().isoformat(timespec="minutes"),
        device=describe_device(device),
        torch=torch.__version__,
        model=args.model,
        mesh=dataclasses.asdict(spec),
        grid=grid,
        tokens=n,
        local_tokens=lc,
        rank_grid=lgrid,
        rows=rows,
        layers=layers,
        depth=cfg.num_layers,
        dtype=args.dtype,
        flops_per_forward=flops.total,
        flops_per_layer=flops.layer,
        flops_full_depth=flops.with_layers(cfg.num_layers).total,
        peak=peak,
        kernels_used=kernels_used,
        fastest_ours=fastest_ours,
    )
    return results


def report(r: dict) -> str:
    peak = r["peak"]["peak_tflops"]
    m = r["mesh"]
    lines = [
        f"Device: {r['device']}; torch {r['torch']}; {r['date']}.",
        f"Command: `{r['command']}`",
        f"Model {r['model']} ({r['layers']} of {r['depth']} layers), {r['dtype']}; mesh {m['name']} "
        f"(dp {m['dp']} × Ulysses {m['ulysses']} × ring {m['ring']}), one rank: {r['rows']} rows × "
        f"{r['local_tokens']:,} of {r['tokens']:,} tokens (grid {tuple(r['grid'])}; presented to diffusers as "
        f"{tuple(r['rank_grid'])}).",
        f"FLOPs per forward of {r['layers']} layers: {r['flops_per_forward']:.4g} ({r['flops_per_layer']:.4g} per "
        "layer); "
        f"at full depth {r['flops_full_depth']:.4g}.",
        f"Matmul peak measured in this run: {peak:.3g} TFLOP/s ("
        + ", ".join(f"{a}×{b}×{c}: {t:.3g}" for a, b, c, t in r["peak"]["shapes"])
        + ").",
        f"Attention kernel ours used: {r['kernels_used'] or 'SDPA (no LSE needed, one device)'}.",
        "",
        f"| variant | forward s (median of {len(next(iter(r['variants'].values())))}) | best s | per layer ms "
        f"| scaled to {r['depth']} layers s | TFLOP/s | MFU vs measured peak | diffusers-best / this |",
        "|---|---|---|---|---|---|---|---|",
    ]
    med = {k: statistics.median(v) for k, v in r["variants"].items()}
    diff = [k for k in med if k.startswith("diffusers")]
    best_diff = min(diff, key=med.get) if diff else None
    for k, t in med.items():
        tflops = r["flops_per_forward"] / t / 1e12
        scaled = t * r["flops_full_depth"] / r["flops_per_forward"]
        ratio = f"{med[best_diff] / t:.2f}×" if best_diff else "—"
        lines.append(
            f"| {k} | {t:.4f} | {min(r['variants'][k]):.4f} | {1e3 * t / r['layers']:.2f} | {scaled:.3f} "
            f"| {tflops:.3g} | {100 * tflops / peak:.1f} % | {ratio} |"
        )
    lines.append("")
    lines.append(
        "Agreement with our eager forward (rel. error): " + ", ".join(f"{k} {v:.2e}" for k, v in r["agreement"].items())
    )
    if r["errors"]:
        lines.append("Did not run: " + "; ".join(f"{k}: {v}" for k, v in r["errors"].items()))
    if r["syncs"] is not None:
        lines.append(
            f"Host synchronisations in one forward ({r['fastest_ours']}): {r['syncs'][0]} {r['syncs'][1]}; "
            f"host enqueue time {r['enqueue_s']:.4f} s vs GPU {med[r['fastest_ours']]:.4f} s."
        )
    if r["attention_kernels"]:
        lines += ["", "| attention kernel (with LSE), rank's per-hop shape | ms | TFLOP/s |", "|---|---|---|"]
        for row in r["attention_kernels"]:
            if "error" in row:
                lines.append(f"| {row['kernel']} | refused: {row['error']} | — |")
            else:
                lines.append(f"| {row['kernel']} | {1e3 * row['seconds']:.3g} | {row['tflops']:.3g} |")
    return "\n".join(lines)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=tuple(MODELS), default="a14b")
    p.add_argument("--resolution", choices=tuple(RESOLUTIONS), default="720p")
    p.add_argument("--grid", type=int, nargs=3, metavar=("F", "H", "W"), help="token grid instead of --resolution")
    p.add_argument("--mesh", default="ulysses8", help="mesh preset (conf/mesh/NAME.yaml) whose rank 0 is measured")
    p.add_argument("--layers", default="auto", help="layers to build: a number, or auto = as many as fit")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=tuple(TOLERANCE))
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-compile", dest="compile", action="store_false", help="skip the torch.compile variant")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (tests: aot_eager)")
    p.add_argument("--cuda-graphs", action="store_true", help="also time compile + CUDA graphs (reduce-overhead)")
    p.add_argument(
        "--kernels",
        nargs="+",
        choices=kernels.names(),
        help="also time our eager forward with each of these ring kernels tried first",
    )
    p.add_argument("--diffusers-backends", nargs="+", help="diffusers attention backends to try (default: all)")
    p.add_argument("--no-diffusers", action="store_true", help="check diffusers' agreement but do not time it")
    p.add_argument("--no-kernel-table", action="store_true")
    p.add_argument(
        "--peak-shapes",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        nargs="+",
        help="GEMMs M,K,N for the matmul peak (default: 8192³, 16384×8192×8192 and the model's)",
    )
    p.add_argument("--tolerance", type=float, help="override the agreement tolerance")
    p.add_argument("--json", help="also write every figure to this file")
    args = p.parse_args(argv)
    args.argv = argv
    if args.layers != "auto" and not args.layers.isdigit():
        raise SystemExit(f"--layers {args.layers}: give a positive number or auto")
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    results = run(args)
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return results


if __name__ == "__main__":
    main()
