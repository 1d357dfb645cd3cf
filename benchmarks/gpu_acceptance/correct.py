"""Phases 1–2: what the device is, and whether the code computes the right thing on it.

Tolerances, each from the test that established it on CPU (the same settings here, so they
apply unchanged):
- device fp32 vs CPU fp32 frames: max |diff| ≤ 2 uint8 levels (the issue's bound: the same
  arithmetic in another summation order flips a rounding here and there, never more);
- bf16 vs fp32 latents: relative L2 ≤ 2e-2 (tests/parallel/test_hot_path.py: bf16's unit
  roundoff 2^-9 over 2 layers × 3 steps, measured 1.07–1.18e-2 over seeds at these settings;
  bf16 GEMMs on a GPU accumulate in fp32 too, so the same bound holds);
- compile=true vs eager, fp32: latents relative L2 ≤ 1e-5 and frames max |diff| ≤ 1 (the same
  test: the captured graph runs the same arithmetic, measured ~1e-7);
- FP8 (quant_compute=fp8) vs bf16 video: RMS < 0.25 × the RMS between two seeds' bf16 videos
  (the quantized-weights branch's own criterion: FP8 moves the video far less than a new seed).
"""

from __future__ import annotations

import importlib
import platform

import numpy as np

# test_hot_path.py's settings, under which its bf16 and compile tolerances were measured.
TINY = ["steps=3", "num_frames=5", "height=48", "width=48", "seed=5", "prompt='a red kite'"]
TASKS = {"t2v": ["model=tiny"], "i2v": ["model=tiny_i2v"], "ti2v": ["model=tiny_ti2v", "height=64", "width=64"]}
FRAMES_MAX_LEVELS = 2
BF16_LATENTS_REL = 2e-2
COMPILE_LATENTS_REL, COMPILE_FRAMES_MAX = 1e-5, 1
FP8_RMS_SHARE = 0.25
OPTIONAL_KERNELS = ("flash_attn", "flash_attn_interface", "sageattention", "xfuser")


# ---------------------------------------------------------------- phase 1
def environment(phase) -> None:
    import torch

    phase.record("python", platform.python_version())
    phase.record("torch", torch.__version__)
    phase.record("cuda", torch.version.cuda)
    phase.record("cudnn", torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
    phase.record("cuda_available", torch.cuda.is_available())
    # TF32 in cuDNN's convolutions (PyTorch's default) moves the VAE's fp32 frames off the CPU's
    phase.record("tf32", {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32})
    if phase.device.startswith("cuda"):
        p = torch.cuda.get_device_properties(phase.device)
        phase.record(
            "gpu",
            {
                "name": p.name,
                "capability": f"{p.major}.{p.minor}",
                "memory_gib": p.total_memory / 2**30,
                "multiprocessors": p.multi_processor_count,
                "count": torch.cuda.device_count(),
            },
        )
    else:
        phase.record("gpu", None)
        phase.record("cpu", f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    found = {}
    for name in OPTIONAL_KERNELS:
        try:
            module = importlib.import_module(name)
            found[name] = getattr(module, "__version__", "importable")
        except Exception as exc:  # ImportError, or a wheel built against another torch/CUDA
            found[name] = f"not importable: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    phase.record("optional_kernels", found)


# ---------------------------------------------------------------- tiny runs
def tiny_run(overrides: list[str], device: str, out, compile_backend: str | None = None):
    """A tiny generation as the CLI composes it, in this process; (latents, frames)."""
    from parallel_wan.backends import make_backend
    from parallel_wan.config.compose import compose_spec
    from parallel_wan.pipeline import generate

    extra = [f"image={first_frame(out)}"] if "model=tiny_i2v" in overrides else []
    spec = compose_spec(list(overrides) + extra + [f"device={device}"], output_dir=str(out / "unused"))
    backend = make_backend(spec, compile_backend=compile_backend or "inductor")
    gen = generate(spec, backend)
    return gen.latents.astype(np.float64), gen.frames.astype(np.int16)


def first_frame(out):
    """An I2V first frame (a gradient), written once into the output folder."""
    import imageio.v3 as iio

    path = out / "first_frame.png"
    if not path.exists():
        y, x = np.mgrid[0:48, 0:48]
        iio.imwrite(path, np.stack([x * 5, y * 5, (x + y) * 2], -1).astype(np.uint8))
    return path


def distance(a, b) -> dict:
    (la, fa), (lb, fb) = a, b
    diff = np.abs(fa - fb)
    return {
        "latents_rel": float(np.linalg.norm(la - lb) / np.linalg.norm(lb)),
        "frames_max_levels": int(diff.max()),
        "frames_mean_levels": float(diff.mean()),
    }


# ---------------------------------------------------------------- phase 2
def videos(phase) -> None:
    """Each task in fp32 on the device against fp32 on the CPU, then bf16 on the device
    against that fp32 (dry run: the CPU stands in for the device)."""
    device = "cpu" if phase.dry_run else phase.device
    for task, model in TASKS.items():
        reference = tiny_run(TINY + model + ["dtype=float32"], "cpu", phase.out)
        # dry run: the device is the CPU, so its fp32 run is the reference itself (not run twice)
        on_device = reference if device == "cpu" else tiny_run(TINY + model + ["dtype=float32"], device, phase.out)
        fp32 = distance(on_device, reference)
        bf16 = distance(tiny_run(TINY + model + ["dtype=bfloat16"], device, phase.out), reference)
        phase.record(
            task,
            {
                "fp32_vs_cpu": {
                    **fp32,
                    "bound_levels": FRAMES_MAX_LEVELS,
                    "ok": fp32["frames_max_levels"] <= FRAMES_MAX_LEVELS,
                },
                "bf16_vs_fp32": {
                    **bf16,
                    "bound_latents_rel": BF16_LATENTS_REL,
                    "ok": bf16["latents_rel"] <= BF16_LATENTS_REL,
                },
            },
        )


def compiled(phase) -> None:
    """compile=true (Inductor on the device; aot_eager in the dry run, as the CPU test does)."""
    device = "cpu" if phase.dry_run else phase.device
    backend = "aot_eager" if phase.dry_run else "inductor"
    base = TASKS["t2v"] + TINY + ["dtype=float32"]
    eager = tiny_run(base, device, phase.out)
    d = distance(tiny_run(base + ["compile=true"], device, phase.out, backend), eager)
    phase.record(
        "fp32",
        {
            **d,
            "compile_backend": backend,
            "bound_latents_rel": COMPILE_LATENTS_REL,
            "bound_levels": COMPILE_FRAMES_MAX,
            "ok": d["latents_rel"] <= COMPILE_LATENTS_REL and d["frames_max_levels"] <= COMPILE_FRAMES_MAX,
        },
    )


def fp8_available() -> bool:
    from parallel_wan.config import schema

    return "quant_compute" in schema.SECTION_OF


def fp8(phase) -> None:
    """quant_compute=fp8 (float8 weights through torch._scaled_mm) when this checkout has it."""
    if not fp8_available():
        phase.record("available", False)
        phase.record("note", "not available in this checkout (no quant_compute setting in config/schema.py)")
        return
    phase.record("available", True)
    device = "cpu" if phase.dry_run else phase.device
    base = TASKS["t2v"] + TINY + ["dtype=bfloat16"]
    bf16 = tiny_run(base, device, phase.out)
    other_seed = tiny_run(base + ["seed=6"], device, phase.out)
    seeds_rms = float(np.sqrt(np.mean((bf16[1] - other_seed[1]) ** 2.0)))
    try:
        quant = tiny_run(base + ["quantize=fp8", "quant_compute=fp8"], device, phase.out)
    except Exception as exc:  # e.g. no FP8 GEMM on this device: say so, keep the rest
        phase.record("fp8_vs_bf16", {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
        return
    rms = float(np.sqrt(np.mean((quant[1] - bf16[1]) ** 2.0)))
    phase.record(
        "fp8_vs_bf16",
        {
            **distance(quant, bf16),
            "frames_rms_levels": rms,
            "seeds_rms_levels": seeds_rms,
            "bound": f"rms < {FP8_RMS_SHARE} × seeds' rms",
            "ok": rms < FP8_RMS_SHARE * seeds_rms,
        },
    )


def more_gpus(phase) -> None:
    """What one GPU cannot check: every collective path needs NCCL between processes on
    different GPUs (one process per GPU; NCCL refuses two ranks on one device)."""
    phase.record("note", "needs 2+ GPUs (NCCL), not checked here")
    phase.record(
        "left",
        [
            (
                "meshes over NCCL (cp2, ulysses4, ring4, usp2x2, dp2_cp2, cp8, ulysses8, dp2_cp4) against one device: "
                "tests/parallel's gloo runs with backend nccl"
            ),
            "link bandwidth: torchrun --nproc-per-node N -m benchmarks.comm --measure",
            "the 8-GPU denoise itself, against the prediction written by this run",
            "memory=sharded (FSDP gathers) and the VAE decode split over real ranks",
            "the server under torchrun on GPUs",
        ],
    )


# ---------------------------------------------------------------- attention kernels
# Per kernel, against the fp32 math kernel on the same (bf16-rounded) inputs: out relative L2
# and lse max |diff|. A 16-bit kernel rounds its softmax weights and its output to 8 bits of
# mantissa (relative 2^-9 each): ~4e-3 on out, so 1e-2 holds with room and a wrong scale or
# layout (O(1)) cannot pass; lse is summed in fp32 from exact products: ~1e-6, bound 1e-3.
# Quantized kernels (int8 QKᵀ) lose more: the issue measured 1.3e-2 for SageAttention (1.2e-2
# in tests/parallel/test_sage_attention.py, whose valid_keys % 64 ≠ 0 also checks its masking;
# so does this table's: length − 7).
# FP8 (e4m3, 3 mantissa bits) ≈ 5e-2 (backends/torch/fp8_attention.py; measured 5.0–5.4e-2 in
# tests/parallel/test_fp8_attention.py): 8e-2. Their lse carries the quantized scores' noise too
# (sage ≤ 1.4e-2 measured, bound 3e-2 as its test; fp8 ≤ 2.9e-2, bound 6e-2).
KERNEL_BOUNDS = {"float32": (1e-5, 1e-5), "bfloat16": (1e-2, 1e-3)}
QUANTIZED_BOUNDS = {"sage": (5e-2, 3e-2), "fp8": (8e-2, 6e-2)}


def kernels(phase) -> None:
    """Every registered kernel (backends/torch/kernels/) at A14B head dims (40 heads × 128)."""
    import torch

    from parallel_wan.backends.torch import attention, kernels

    device = torch.device("cpu" if phase.dry_run else phase.device)
    dtype = torch.float32 if phase.dry_run else torch.bfloat16
    length = 64 if phase.dry_run else 4096
    gen = torch.Generator(device).manual_seed(0)
    q, k, v = (torch.randn(1, length, 40, 128, generator=gen, device=device).to(dtype) for _ in range(3))
    valid = length - 7  # padded keys are masked: the last 7 must not count
    ref_out, ref_lse = attention.attention_with_lse(q.float(), k.float(), v.float(), valid_keys=valid, kernel="math")
    out_bound, lse_bound = KERNEL_BOUNDS[str(dtype).replace("torch.", "")]
    table = {}
    for name in kernels.names():
        try:
            out, lse = attention.attention_with_lse(q, k, v, valid_keys=valid, kernel=name)
        except Exception as exc:  # not built for this device / dtype / head size: a fact to record
            table[name] = {
                "runs": False,
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}",
            }
            continue
        rel = float((out.double() - ref_out.double()).norm() / ref_out.double().norm())
        lse_err = float((lse.double() - ref_lse.double()).abs().max())
        bound, name_lse_bound = QUANTIZED_BOUNDS.get(name, (out_bound, lse_bound))
        table[name] = {
            "runs": True,
            "out_rel": rel,
            "lse_max_abs": lse_err,
            "bound_out_rel": bound,
            "bound_lse": name_lse_bound,
            "ok": rel <= bound and lse_err <= name_lse_bound,
        }
        phase.record("kernels", table)
    phase.record(
        "shape",
        {
            "batch": 1,
            "tokens": length,
            "valid_keys": valid,
            "heads": 40,
            "head_dim": 128,
            "dtype": str(dtype).replace("torch.", ""),
            "reference": "math kernel, float32",
        },
    )
    phase.record("kernels", table)


def verdicts(results: dict) -> list[str]:
    """The names of every check in a correctness phase's results that failed (for the summary)."""
    bad = []

    def walk(node, path):
        if isinstance(node, dict):
            if node.get("ok") is False:
                bad.append(path)
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else k)

    walk(results, "")
    return bad
