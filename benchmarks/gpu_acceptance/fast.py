"""Phase 3: how fast, through the existing benchmarks' own functions.

- GEMM peak: benchmarks/matmul_peak.py (bf16; FP8 e4m3 through torch._scaled_mm on sm_89+);
- one rank's A14B 720p forward per mesh: benchmarks/step.py's run (ours eager, fused,
  compiled, compiled + CUDA graphs, each ring kernel forced, diffusers' WanTransformer3DModel
  per attention backend, MFU against the GEMM peak it measures, host syncs per forward, and its
  per-kernel table at the rank's per-hop shape);
- VAE decode of 720p × 81 frames, one height band per rank count: benchmarks/vae_decode.py's
  band decode with the exchanges dropped (real Wan 2.1 VAE dims, random weights);
- load rate from the page cache: benchmarks/load.py;
- every attention kernel, the lossy ones too (sage, fp8), at the one-GPU A14B 720p × 81 shape
  (75,600 tokens × 40 heads × 128): benchmarks/attention_speed.py's speeds and distances from cuDNN;
- whole videos (text + denoise + decode through `generate`, diffusers' WanPipeline beside it):
  benchmarks/video.py's table within this phase's budget.
The dry run runs the same calls at CPU sizes (tiny model, small GEMMs, a narrow VAE).
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

MESHES = ("ulysses8", "cp8", "dp2_cp4")
GEMM_SHAPES_GPU = ((8192, 8192, 8192), (16384, 8192, 8192), (8192, 16384, 8192))
GEMM_SHAPES_CPU = ((128, 128, 128), (256, 128, 128))
# Wan 2.1 VAE (the A14B models'): 720p × 81 frames = 21 latent frames of 90 × 160.
VAE_GPU = {"base_dim": 96, "latent_frames": 21, "rows": 90, "cols": 160, "ranks": (8, 4, 2, 1)}
VAE_CPU = {"base_dim": 8, "latent_frames": 2, "rows": 8, "cols": 12, "ranks": (2, 1)}
LOAD_CPU_BLOCK = {
    "num_attention_heads": 2,
    "attention_head_dim": 8,
    "ffn_dim": 32,
    "text_dim": 16,
    "freq_dim": 16,
    "in_channels": 4,
    "out_channels": 4,
    "patch_size": [1, 2, 2],
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "rope_max_seq_len": 1024,
}


def gemm(phase) -> None:
    import torch

    from benchmarks.matmul_peak import fp8_gemm_tflops, measure_peak

    dry = phase.dry_run
    device = "cpu" if dry else phase.device
    shapes = GEMM_SHAPES_CPU if dry else GEMM_SHAPES_GPU
    dtype = torch.float32 if dry else torch.bfloat16
    phase.record(
        "dense",
        {
            "dtype": str(dtype).replace("torch.", ""),
            **measure_peak(device, dtype, shapes, warmup=1 if dry else 3, iters=2 if dry else 10),
        },
    )
    capable = dry or torch.cuda.get_device_capability(device) >= (8, 9)
    if not capable:
        phase.record(
            "fp8", {"note": f"sm_{''.join(map(str, torch.cuda.get_device_capability(device)))} has no FP8 GEMM"}
        )
        return
    phase.record(
        "fp8", [fp8_gemm_tflops(m, k, n, device, warmup=1 if dry else 3, iters=2 if dry else 10) for m, k, n in shapes]
    )


def step_commands(mesh: str, dry: bool, device: str) -> tuple[list[str], list[str]]:
    """benchmarks/step.py's two command lines for one mesh (what BENCHMARKS_rows.md quotes):
    first the eager variants, each ring kernel forced, diffusers and the kernel table; then the
    compiled ones (their compiles take most of the phase), so a phase cut off in the second keeps
    the first. The second checks diffusers' agreement on one backend and times none."""
    from benchmarks.comm_volume import load_preset

    ring = load_preset(mesh).ring > 1
    if dry:
        # the tiny model has 4 heads: Ulysses 8 cannot split them; its CPU stand-in is Ulysses 4
        common = [
            "--model",
            "tiny",
            "--grid",
            "3",
            "5",
            "5",
            "--mesh",
            "ulysses4" if mesh == "ulysses8" else mesh,
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--compile-backend",
            "aot_eager",
            "--peak-shapes",
            "64,64,64",
            "--warmup",
            "0",
            "--iters",
            "1",
        ]
        kernels, graphs = ["cpu_flash", "math"], []
    else:
        # 4 layers: every figure is per layer and scaled to 40 (step.py), and the compile
        # captures one block whatever the depth.
        common = [
            "--model",
            "a14b",
            "--resolution",
            "720p",
            "--mesh",
            mesh,
            "--device",
            device,
            "--layers",
            "4",
            "--warmup",
            "1",
            "--iters",
            "3",
        ]
        kernels, graphs = device_kernels(), ["--cuda-graphs"]
    eager = (
        common + ["--no-compile"] + (["--kernels", *kernels] if ring else []) + (["--no-kernel-table"] if dry else [])
    )
    compiled = common + graphs + ["--no-kernel-table", "--no-diffusers", "--diffusers-backends", "native"]
    return eager, compiled


def device_kernels() -> list[str]:
    """The ring kernels worth forcing on this GPU: every 16-bit one the attention module lists,
    and sage (int8 QKᵀ: attention_impl=sage) when sageattention is installed."""
    import importlib.util

    names = [
        k for k in ("flash_attn3", "flash_attn", "cuda_cudnn", "cuda_flash", "cuda_efficient") if k in _kernel_names()
    ]
    return names + (["sage"] if "sage" in _kernel_names() and importlib.util.find_spec("sageattention") else [])


def _kernel_names():
    from parallel_wan.backends.torch import kernels

    return kernels.names()


def mesh_step(mesh: str):
    def phase_fn(phase) -> None:
        from benchmarks import step

        eager, compiled = step_commands(mesh, phase.dry_run, phase.device)
        phase.record("commands", ["python -m benchmarks.step " + " ".join(a) for a in (eager, compiled)])
        r = step.run(step.parse(eager))
        phase.record("step", r)
        phase.record("summary", summarize(r))
        c = step.run(step.parse(compiled))
        # same seed, shapes and layers: the same weights and inputs, so the timings sit side by side
        for name in c["variants"]:
            if "compiled" in name:
                r["variants"][name] = c["variants"][name]
                r["agreement"][name] = c["agreement"][name]
        r["errors"].update({k: v for k, v in c["errors"].items() if "compiled" in k or "graphs" in k})
        r["fastest_ours"] = min(
            (k for k in r["variants"] if k.startswith("ours")), key=lambda k: statistics.median(r["variants"][k])
        )
        r["syncs_compiled"], r["enqueue_s_compiled"] = c["syncs"], c["enqueue_s"]
        phase.record("step", r)
        phase.record("summary", summarize(r))

    return phase_fn


def summarize(r: dict) -> dict:
    med = {k: statistics.median(v) for k, v in r["variants"].items()}
    peak = r["peak"]["peak_tflops"]
    rows = {}
    for k, t in med.items():
        tflops = r["flops_per_forward"] / t / 1e12
        rows[k] = {
            "seconds": t,
            "per_layer_ms": 1e3 * t / r["layers"],
            "full_depth_s": t * r["flops_full_depth"] / r["flops_per_forward"],
            "tflops": tflops,
            "mfu": tflops / peak,
        }
    diffusers = [k for k in med if k.startswith("diffusers")]
    best_diff = min(diffusers, key=med.get) if diffusers else None
    return {
        "variants": rows,
        "fastest_ours": r["fastest_ours"],
        "best_diffusers": best_diff,
        "diffusers_over_ours": med[best_diff] / med[r["fastest_ours"]] if best_diff else None,
        "host_syncs": r["syncs"][0] if r["syncs"] else None,
        "host_syncs_compiled": (r.get("syncs_compiled") or [None])[0],
        "peak_tflops": peak,
    }


def vae(phase) -> None:
    """Rank 0's band of a 1-, 2-, 4- and 8-way height split (the largest band), decoded for
    real with the exchanges dropped: seconds and peak device memory per rank count."""
    import torch

    from benchmarks.vae_decode import meta_params
    from parallel_wan.backends.torch import ops, vae_decode as split
    from parallel_wan.backends.torch.collectives import NullCollectives
    from parallel_wan.models import vae as model
    from parallel_wan.models.vae_config import VaeConfig

    dims = VAE_CPU if phase.dry_run else VAE_GPU
    device = torch.device("cpu" if phase.dry_run else phase.device)
    cfg = dataclasses.replace(VaeConfig.wan2_1(), base_dim=dims["base_dim"])
    params, weight_bytes = meta_params(cfg, str(device))
    latents = torch.randn(1, cfg.z_dim, dims["latent_frames"], dims["rows"], dims["cols"], device=device)
    phase.record(
        "setup",
        {
            "vae": f"Wan 2.1, base {cfg.base_dim}",
            "latents": list(latents.shape),
            "frames": 1 + cfg.scale_factor_temporal * (dims["latent_frames"] - 1),
            "weights_gb": weight_bytes / 1e9,
            "dtype": "float32",
        },
    )
    table = {}
    for ranks in dims["ranks"]:
        bands = split.height_bands(dims["rows"], ranks)
        start, stop = bands[0]
        band_ops = ops if ranks == 1 else split.HeightBandOps([b - a for a, b in bands], 0, NullCollectives(0, ranks))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            z = model.denormalize_latents(latents[:, :, :, start:stop], cfg, ops)
            video = model.decode(params, z, band_ops, cfg)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        table[str(ranks)] = {
            "latent_rows": stop - start,
            "seconds": time.perf_counter() - t0,
            "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
            "finite": bool(torch.isfinite(video).all()),
        }
        del video, z
        phase.record("bands", table)


def attention(phase) -> None:
    """Every attention kernel, the block-sparse kernel per decay and the fused elementwise ops,
    each at the one-GPU A14B 720p × 81 shape (the dry run: CPU shapes)."""
    import torch

    from benchmarks.attention_speed import CPU_SHAPE, GPU_SHAPE, kernel_speeds, sparse_speeds
    from benchmarks.elementwise import CPU_ROWS, GPU_ROWS, op_speeds

    dry = phase.dry_run
    device = "cpu" if dry else phase.device
    shape, rows = (CPU_SHAPE, CPU_ROWS) if dry else (GPU_SHAPE, GPU_ROWS)
    times = {"warmup": 1, "iters": 2} if dry else {"warmup": 2, "iters": 5}

    def sized(measure, s, **more):
        return measure(device, s["tokens"], s["heads"], s["head_dim"], getattr(torch, s["dtype"]), **more)

    phase.record("kernels", sized(kernel_speeds, shape, **times))
    phase.record("sparse", sparse_speeds(device, shape, getattr(torch, shape["dtype"]), **times))
    phase.record(
        "elementwise", sized(op_speeds, rows, **({"warmup": 1, "iters": 2} if dry else {"warmup": 3, "iters": 10}))
    )


def load(phase) -> None:
    """The page cache's rates, then a LoRA'd expert's load + placement on the device against the
    plain one's (benchmarks/lora_placement.py: issue 43's ≤ 1.2×), on the same checkpoint."""
    from benchmarks.load import A14B_BLOCK, page_cache_rates
    from benchmarks.lora_placement import placement_with_lora

    block, layers = (LOAD_CPU_BLOCK, 1) if phase.dry_run else (A14B_BLOCK, 2)
    repeats = 2 if phase.dry_run else 3
    with tempfile.TemporaryDirectory(prefix="acceptance_load_", dir=_scratch(phase)) as root:
        phase.record("rates", page_cache_rates(Path(root), layers, repeats, block))
        device = "cpu" if phase.dry_run else phase.device
        phase.record("lora", placement_with_lora(Path(root), layers, repeats, block, device))


# What the video table leaves of the phase's budget: the child's imports and the row in flight
# when a prediction was short.
VIDEO_MARGIN_S = 20.0


def whole_video(phase) -> None:
    """benchmarks/video.py's rows, each written as it finishes (a phase cut off keeps them)."""
    from benchmarks import video

    budget = max(1.0, (phase.budget_s or 220.0) - VIDEO_MARGIN_S)
    argv = ["--budget-s", f"{budget:.0f}"] + (["--dry-run"] if phase.dry_run else ["--device", phase.device])
    phase.record("command", "python -m benchmarks.video " + " ".join(argv))
    phase.record("video", video.run(video.parse(argv), on_row=lambda doc: phase.record("video", doc)))


def _scratch(phase):
    return str(phase.out)  # the output folder's disk, not a tmpfs /tmp that would hold it in memory twice
