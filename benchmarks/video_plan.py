"""The whole-video table's rows and its plan: what each recipe sets, and the seconds and memory
a row is predicted to take on the GPU (benchmarks/video.py's docstring works the arithmetic
through). RECIPES is in the order the rows run: the most wanted first."""

from __future__ import annotations

import dataclasses

import torch

from parallel_wan.config.few_step import LIGHTNING_SIGMAS
from parallel_wan.errors import ConfigError

A14B, TINY = "wan2.2_t2v_a14b", "tiny"
TIMED_STEPS = 2
# One A14B forward of 720p×81 (75,600 tokens, one row) on one H200: half of the ≈ 24 s CFG step.
FORWARD_720P_S = 12.0
DECODE_720P_S, DECODE_720P_GB = 6.06, 29.25  # Wan 2.1 VAE, 720p×81, one rank (BENCHMARKS.md)
TEXT_S, SETUP_S, TRITON_COMPILE_S, QUANTIZE_S = 1.0, 40.0, 20.0, 5.0
CPU_FLOPS = 20e9  # the dry run's first guess, corrected by the first row that runs
# Frames ours vs diffusers on the tiny model in float32: the same arithmetic in another order,
# ±2 uint8 levels (tests/harness/frames.py MAX_ABS).
FRAMES_MAX_LEVELS = 2


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    what: str  # for the row
    preset: str  # conf/model/… of the A14B run; the dry run takes the tiny one
    size: tuple[int, int, int]  # height, width, frames
    steps: int  # the recipe's steps
    settings: tuple[str, ...] = ()  # what this row adds
    diffusers: bool = False  # diffusers runs it too (the next row)
    baseline: str | None = None  # our row it is compared with
    compiles: bool = False  # a Triton kernel compiles on its first use

    def lightning(self) -> bool:
        return "lightning" in self.preset


P480, P720 = (480, 832, 81), (720, 1280, 81)
LIGHT = "wan2.2_t2v_a14b_lightning"


def _variant(name: str, *settings: str, compiles: bool = True) -> Recipe:
    """A Lightning row with settings of its own, compared with our bf16 Lightning row."""
    return Recipe(
        name, "… " + " ".join(settings), LIGHT, P720, 4, settings, baseline="lightning bf16", compiles=compiles
    )


RECIPES = (
    Recipe("lightning bf16", "Lightning: 4 Euler steps, no CFG, 720p×81", LIGHT, P720, 4, diffusers=True),
    Recipe("dense 480p", "40 UniPC steps, CFG 4 / 3, 480p×81", A14B, P480, 40, diffusers=True),
    _variant("lightning fp8 attention", "attention_impl=fp8"),  # new: never timed on a whole video
    _variant("lightning sage", "attention_impl=sage"),
    _variant("lightning fp8 weights", "quantize=fp8", compiles=False),
    _variant("lightning radial", "sparse=radial", "sparse_dense_steps=1"),
    _variant("lightning svg", "sparse=svg", "sparse_dense_steps=1"),
)
TINY_SIZES = {P720: (32, 48, 5), P480: (32, 32, 5)}


# ---------------------------------------------------------------- the spec of a row
def overrides(recipe: Recipe, dry: bool, device: str, empty_dir: str) -> list[str]:
    """The row's `key=value` settings, as the CLI takes them: the recipe's preset at its size,
    `timed_steps` of its steps, this row's settings."""
    height, width, frames = TINY_SIZES[recipe.size] if dry else recipe.size
    if recipe.lightning():
        steps = f"sigmas=[{','.join(repr(s) for s in LIGHTNING_SIGMAS[:TIMED_STEPS])}]"
    else:
        steps = f"steps={TIMED_STEPS}"
    preset = recipe.preset.replace("wan2.2_t2v_a14b", "tiny") if dry else recipe.preset
    return [
        f"model={preset}",
        f"checkpoint_dir={empty_dir}",
        f"device={device}",
        f"dtype={'float32' if dry else 'bfloat16'}",
        f"height={height}",
        f"width={width}",
        f"num_frames={frames}",
        steps,
        "seed=42",
        *recipe.settings,
    ]


def compose(recipe: Recipe, dry: bool, device: str, empty_dir: str):
    """(spec, None) or (None, why not): a setting this checkout lacks (sparse= before it lands)
    or one refused here is the row's note."""
    from parallel_wan.config.compose import compose_spec

    try:
        return compose_spec(overrides(recipe, dry, device, empty_dir), output_dir="/tmp/unused"), None
    except ConfigError as exc:
        return None, f"refused: {exc}"
    except Exception as exc:  # Hydra: a key conf/config.yaml does not have yet
        missing = [s.partition("=")[0] for s in recipe.settings if s.partition("=")[0] in str(exc)]
        if missing:
            return None, f"not available in this checkout: conf/config.yaml has no {missing[0]}= setting"
        raise


def kernel_missing(recipe: Recipe, device: torch.device, dtype: str) -> str | None:
    """Why the row's attention_impl= has no kernel for this device and dtype (the kernels'
    records: backends/torch/kernels/), before anything runs; None when one may run."""
    from parallel_wan.backends.torch import kernels

    for setting in recipe.settings:
        key, _, impl = setting.partition("=")
        if key != "attention_impl":
            continue
        found = kernels.of_setting(impl)
        if not any(device.type in k.devices and dtype in k.dtypes for k in found):
            return (
                f"not run here: attention_impl={impl} runs "
                + "; ".join(f"{k.name} on {', '.join(k.devices)} in {', '.join(k.dtypes)}" for k in found)
                + f", not {device.type} {dtype}"
            )
    return None


# ---------------------------------------------------------------- predictions
def predicted(recipe: Recipe, cfg, dry: bool, calibration: float) -> dict:
    """Seconds of the row as run (timed steps) and its decode's peak GB: the plan's arithmetic."""
    from parallel_wan.measure.flops import forward_flops
    from parallel_wan.models.registry import architecture

    height, width, frames = TINY_SIZES[recipe.size] if dry else recipe.size
    tokens = (1 + (frames - 1) // 4) * (height // 16) * (width // 16)
    rows = 1 if recipe.lightning() else 2
    flops = forward_flops(cfg, tokens, rows=rows, key_tokens=tokens).total
    if dry:
        step = flops / CPU_FLOPS
    else:
        full = forward_flops(architecture(A14B).transformer, 75_600, rows=1, key_tokens=75_600).total
        step = FORWARD_720P_S * flops / full * (1.1 if "quantize=fp8" in recipe.settings else 1.0)
    pixels = height * width * frames / (720 * 1280 * 81)
    once = (TRITON_COMPILE_S if recipe.compiles else 0) + (QUANTIZE_S if "quantize=fp8" in recipe.settings else 0)
    seconds = calibration * (TEXT_S + TIMED_STEPS * step + DECODE_720P_S * pixels) + (0 if dry else once)
    return {"seconds": seconds, "step_s": calibration * step, "decode_gb": DECODE_720P_GB * pixels}


def plan_rows(names: list[str] | None) -> list[tuple[Recipe, str]]:
    """(recipe, "ours" | "diffusers") in the order they run: each diffusers row after ours."""
    out = []
    for r in RECIPES:
        if names and r.name not in names:
            continue
        out.append((r, "ours"))
        if r.diffusers:
            out.append((r, "diffusers"))
    return out


def fits(pred: dict, resident_gb: float, device: torch.device, recipe: Recipe, model_gb: dict) -> str | None:
    if device.type != "cuda":
        return None
    total = torch.cuda.get_device_properties(device).total_memory / 1e9
    extra = model_gb["experts"] / 2 if "quantize=fp8" in recipe.settings else 0.0
    need = resident_gb + extra + pred["decode_gb"]
    if need > 0.95 * total:
        return (
            f"would not fit: {resident_gb:.1f} GB resident + {extra:.1f} GB fp8 experts + "
            f"{pred['decode_gb']:.1f} GB decode > {total:.0f} GB"
        )
    return None
