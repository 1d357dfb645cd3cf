"""Whole videos on one GPU: text encode + denoise + VAE decode end to end through our real
`generate`, at T2V-A14B's real shapes with random weights, beside diffusers' `WanPipeline` on the
same weights, for the recipes users run.

    python -m benchmarks.video --json DIR/video.json --md DIR/video.md        # one H100/H200, ≤ 10 min
    python -m benchmarks.video --dry-run                              # CPU, tiny model: the code paths

What runs: two 14B experts (40 layers, dim 5120), the UMT5-XXL encoder's shape (24 layers, d_model
4096, 256,384-row vocabulary) and the Wan 2.1 VAE, every tensor random and made on the device
(benchmarks/video_models.py; no checkpoint: 57 GB of experts cannot be written on the lent
machine's 64 GB disk). Our rows go through `generate(spec, backend, components=Loaded(...))`
with the spec composed from conf/ as the CLI composes it; diffusers' rows through `WanPipeline`
on the same modules (the experts, the encoder and the VAE are shared, not copied). Rows, in the
order they run:

  lightning bf16      recipe=lightning: 4 Euler steps, guidance 1 (no CFG),    ours, diffusers
                      1280×720×81
  dense 480p          40 steps with CFG (guidance 4 / 3), UniPC, 832×480×81   ours, diffusers
  lightning fp8 attn  … attention_impl=fp8 (the FP8 Triton attention kernel)             ours
  lightning sage      … attention_impl=sage                                             ours
  lightning fp8 w     … quantize=fp8 (one-byte block linears, quant_compute=auto)        ours
  lightning radial    … sparse=radial sparse_dense_steps=1 ("not available" without it)  ours
  lightning svg       … sparse=svg sparse_dense_steps=1 (Sparse-VideoGen's head choice)  ours

Scaling, said in every row: each row runs its real shapes but only TIMED_STEPS of its steps
(2 of 40 dense; 2 of Lightning's 4, its first two sigmas — both high-noise steps, which cost what
low-noise ones do: the experts have one shape). End to end scaled = measured total + (steps −
timed) × the last timed step's seconds (the first step carries one-time costs: cuDNN plans,
Triton compiles). Per phase (text, denoise, decode): seconds and `torch.cuda.max_memory_allocated`
reset at the phase's start. Ratios: diffusers' scaled end to end / ours where diffusers ran the
same recipe; the Lightning variants against our bf16 Lightning row.

Plan arithmetic (one H200; BENCHMARKS.md "GPU acceptance", 2026-11-26): an A14B 720p×81 step with
CFG ≈ 24 s on one GPU (8 × 3.1–3.2 s per ulysses8 rank), so one forward of 75,600 tokens ≈ 12 s;
480p×81 (32,760 tokens) with CFG = 0.51 × that in FLOPs (measure/flops.py) ≈ 6.2 s per step; VAE
decode 720p×81 6.1 s / 29 GB peak (one rank), 480p ≈ 0.43 × that; the UMT5 text phase ≈ 1 s;
building 28.6 B + 5.7 B random parameters on the device and importing diffusers ≈ 40 s.

  setup                                                             40 s
  dense 480p, ours and diffusers: 2 × (1 + 2 × 6.2 + 2.6)          32 s
  lightning bf16, ours and diffusers: 2 × (1 + 2 × 12 + 6.1)       62 s
  fp8 weights: quantize 28.6 B weights ≈ 5 + 1 + 2 × 13 + 6.1      38 s
  sage, fp8 attention, radial, svg: 4 × (20 s Triton compile + 31) 204 s
  total                                                    ≈ 376 s of the default --budget-s 540

so the table fits one 10-minute command with room for a slower device (svg runs radial's kernel,
compiled already when radial's row ran: its 20 s are a margin). Rows run in the order above, the
most wanted first (the acceptance phase's 200 s reach the fp8 attention row; earlier phases'
unspent seconds add to it), each only when its predicted seconds fit its budget — what is left
of --budget-s when it starts — else it is skipped with the arithmetic in its note, and a later,
cheaper row may still run; predictions are
corrected by the measured/predicted ratio of the last row that ran.

Memory (141 GB H200): experts 57.2 GB + encoder 11.4 GB (kept for diffusers' rows; the product
frees it after the text phase) + a 720p decode's 29 GB; the fp8 row adds 28.6 GB of one-byte
experts. A row whose predicted peak exceeds the device is skipped with its sum (on an
80 GB H100 the 57 + 11 GB of weights leave too little for either decode: the H200 is the
table's machine).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from parallel_wan.errors import ConfigError
from parallel_wan.weights import tree

from .step import describe_device
from .video_plan import (
    A14B,
    RECIPES,
    TINY,
    compose,
    fits,
    kernel_missing,
    overrides,
    plan_rows,
    predicted,
)


# ---------------------------------------------------------------- our run, per phase
@contextmanager
def phase_peaks(device: torch.device):
    """generate's PhaseTimer with each phase's peak device memory beside its seconds: the peak
    statistic reset after the phase's opening synchronisation and read after its closing one."""
    from parallel_wan.report.timing import PhaseTimer

    # the module, not the function of the same name that parallel_wan.pipeline exports
    module = importlib.import_module("parallel_wan.pipeline.generate")

    timers = []

    class PeakTimer(PhaseTimer):
        def __init__(self, sync=None):
            super().__init__(sync)
            self.peak_gb = {}
            timers.append(self)

        @contextmanager
        def phase(self, name):
            with super().phase(name):
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                yield
            if device.type == "cuda":
                gb = torch.cuda.max_memory_allocated(device) / 1e9
                self.peak_gb[name] = max(self.peak_gb.get(name, 0.0), gb)

    module.PhaseTimer = PeakTimer
    try:
        yield timers
    finally:
        module.PhaseTimer = PhaseTimer


class StepClock:
    """generate's `progress`: each step's seconds, the device synchronised after it."""

    def __init__(self, sync):
        self.sync, self.seconds = sync, []

    def __call__(self, steps):
        self.sync()
        t = time.perf_counter()
        for step in steps:
            yield step
            self.sync()
            now = time.perf_counter()
            self.seconds.append(now - t)
            t = now


def run_ours(model, spec, device: torch.device) -> dict:
    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline.generate import generate

    from .video_models import loaded

    backend = make_backend(spec)
    t0 = time.perf_counter()
    components = loaded(model, backend, spec.execution.dtype, spec.quantization.quantize)
    backend.synchronize()
    prepare = time.perf_counter() - t0  # quantize=fp8: the load's quantization, outside generate
    clock = StepClock(backend.synchronize)
    with phase_peaks(device) as timers:
        gen = generate(spec, backend, components=components, progress=clock)
    t = gen.timings
    return {
        "seconds": {"text": t["text"], "denoise": t["denoise"], "decode": t["vae_decode"], "total": t["total"]},
        "prepare_s": prepare,
        "peak_gb": {k.replace("vae_", ""): v for k, v in timers[-1].peak_gb.items()} or None,
        "step_s": clock.seconds,
        "frames": gen.frames,
        "attention": gen.info.get("attention"),
        "sparse": gen.info.get("sparse"),
        **weights_record(model, components),
    }


def weights_record(model, components) -> dict:
    """How many of our experts' tensors are diffusers' own storage (no copy), and how many are
    quantize=fp8's one-byte weights and their scales (built apart from it)."""
    from parallel_wan.weights.quantized.names import is_scale

    theirs = {p.data_ptr() for m in model.experts.values() for p in m.parameters()}
    flat = {f"{e}.{k}": t for e, (_, params) in components.experts.items() for k, t in tree.flatten(params).items()}
    quantized = {k for k, t in flat.items() if t.element_size() == 1 or is_scale(k)}
    return {
        "expert_tensors": len(flat),
        "shared_with_diffusers": sum(flat[k].data_ptr() in theirs for k in flat if k not in quantized),
        "quantized_tensors": len(quantized),
    }


def scaled(result: dict, steps: int) -> dict:
    """End to end with every step of the recipe: the steps not run at the last timed step's time."""
    done = len(result["step_s"])
    rest = (steps - done) * result["step_s"][-1]
    return {
        "denoise": result["seconds"]["denoise"] + rest,
        "total": result["seconds"]["total"] + rest,
        "how": f"{done} of {steps} steps run; the other {steps - done} at the last step's {result['step_s'][-1]:.3g} s"
        if steps > done
        else "every step run",
    }


def frame_distance(a, b) -> dict:
    diff = abs(a.astype("int16") - b.astype("int16"))
    return {"max_levels": int(diff.max()), "mean_levels": float(diff.mean())}


def run(args, on_row=None) -> dict:
    """Every row within `args.budget_s`; `on_row(doc)` after each (the acceptance phase writes
    what it has so far)."""
    from .video_models import build

    start = time.perf_counter()
    dry = args.dry_run
    device = torch.device("cpu" if dry else args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"--device {args.device}: no CUDA device here; run on a GPU, or pass --dry-run")
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(device)
    doc = {
        "command": "python -m benchmarks.video " + " ".join(args.argv or []),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "device": describe_device(device),
        "torch": torch.__version__,
        "dry_run": dry,
        "architecture": TINY if dry else A14B,
        "dtype": "float32" if dry else "bfloat16",
        "budget_s": args.budget_s,
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="video_bench_") as empty_dir:
        t0 = time.perf_counter()
        model = build(doc["architecture"], device, getattr(torch, doc["dtype"]), empty_dir=empty_dir)
        doc["setup_s"] = time.perf_counter() - t0
        doc["model_gb"] = {k: v / 1e9 for k, v in model.bytes().items()}
        plan = plan_rows(args.rows)
        calibration, ours = 1.0, {}
        for recipe, side in plan:
            row = {"recipe": recipe.name, "what": recipe.what, "side": side, "steps": recipe.steps}
            row["settings"] = overrides(recipe, dry, str(device), "DIR")[:1] + list(recipe.settings)
            row["budget_s"] = args.budget_s - (time.perf_counter() - start)  # what is left of it
            doc["rows"].append(row)
            spec, why = compose(recipe, dry, str(device), empty_dir)
            pred = predicted(recipe, model.arch.transformer, dry, calibration)
            why = why or _why_not(row, recipe, side, pred, device, doc, ours)
            if why is None:
                why = _run_row(row, recipe, side, spec, model, device, ours)
                if why is None:  # later predictions follow what this device measured
                    calibration *= row["step_s"][-1] / pred["step_s"]
            row["ran"] = why is None
            if why is not None:
                row["note"] = why
            _release(device)
            if on_row:
                on_row(doc)
    doc["seconds"] = time.perf_counter() - start
    return doc


def _why_not(row, recipe, side, pred, device, doc, ours) -> str | None:
    """Why the row is not run (no kernel here, it would not fit, its budget is short); None to run it."""
    if side == "diffusers" and recipe.name not in ours:
        return "our row of this recipe did not run"
    why = kernel_missing(recipe, device, doc["dtype"])
    if why is not None:
        return why
    row["predicted_s"] = pred["seconds"]
    resident = torch.cuda.memory_allocated(device) / 1e9 if device.type == "cuda" else 0.0
    why = fits(pred, resident, device, recipe, doc["model_gb"])
    if why is None and pred["seconds"] > row["budget_s"]:
        why = (
            f"skipped: predicted {pred['seconds']:.0f} s > the {row['budget_s']:.0f} s left "
            f"of --budget-s {doc['budget_s']:g}"
        )
    return why


def _run_row(row, recipe, side, spec, model, device, ours) -> str | None:
    """Runs the row into `row`; None, or why it did not run (a refusal, a kernel that cannot)."""
    from parallel_wan.pipeline.generate import texts_of

    from . import video_diffusers

    try:
        if side == "ours":
            result = run_ours(model, spec, device)
        else:
            result = video_diffusers.run(model, spec, texts_of(spec), device)
    except ConfigError as exc:
        return f"refused: {exc}"
    except (RuntimeError, NotImplementedError, ImportError) as exc:
        if isinstance(exc, torch.OutOfMemoryError):
            return f"out of memory: {str(exc).splitlines()[0][:200]}"
        return f"did not run: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    frames = result.pop("frames")
    row.update(result)
    row["scaled"] = scaled(result, recipe.steps)
    if side == "ours":
        ours[recipe.name] = {"frames": frames, "total": row["scaled"]["total"]}
        base = ours.get(recipe.baseline)
        if base is not None:
            row["vs_baseline"] = base["total"] / row["scaled"]["total"]
    else:
        mine = ours[recipe.name]
        row["diffusers_over_ours"] = row["scaled"]["total"] / mine["total"]
        row["frames_vs_ours"] = frame_distance(frames, mine["frames"])
    return None


def _release(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- output
def _num(v, fmt=".3g") -> str:
    return "—" if v is None else format(v, fmt)


def markdown(doc: dict) -> str:
    """The rows for BENCHMARKS.md's "Whole videos" section."""
    label = (
        "**Dry run on CPU (tiny model, tiny sizes): the code paths, not GPU figures.**"
        if doc["dry_run"]
        else "Measured (random weights at the real shapes; scaled rows say how)."
    )
    gb = doc["model_gb"]
    lines = [
        f"Device: {doc['device']}; torch {doc['torch']}; {doc['date']}. Command: `{doc['command']}`.",
        "",
        label,
        "",
        f"Model {doc['architecture']} ({doc['dtype']}): experts {gb['experts']:.1f} GB, text encoder "
        f"{gb['text_encoder']:.1f} GB (kept for diffusers: in every peak), VAE {gb['vae']:.2f} GB; built in "
        f"{doc['setup_s']:.0f} s.",
        "",
        "| recipe | pipeline | text s | denoise s (steps run) | decode s | end to end s, measured "
        "| end to end s, all steps | peak GB text / denoise / decode | diffusers / ours | note |",
        "|" + "---|" * 10,
    ]
    for r in doc["rows"]:
        name = f"{r['recipe']} ({r['what']})"
        if not r["ran"]:
            lines.append(f"| {name} | {r['side']} | | | | | | | | {r['note']} |")
            continue
        s, p = r["seconds"], r.get("peak_gb") or {}
        peaks = " / ".join(_num(p.get(k), ".1f") for k in ("text", "denoise", "decode"))
        ratio = (
            f"{r['diffusers_over_ours']:.2f}×"
            if "diffusers_over_ours" in r
            else f"{r['vs_baseline']:.2f}× vs ours bf16"
            if "vs_baseline" in r
            else "—"
        )
        note = r["scaled"]["how"]
        if r.get("attention"):
            note += f"; attention {r['attention'].get('kernel')}"
        if r.get("sparse"):
            note += f"; sparse {r['sparse'].get('sparse')}, block density {r['sparse'].get('block_density', '?')}"
        if r.get("quantized_tensors"):  # quantized at load, as the product's load does: not in the columns
            note += f"; {r['quantized_tensors']} quantized tensors, made in {r['prepare_s']:.3g} s before the run"
        if "frames_vs_ours" in r:
            note += f"; frames vs ours: max {r['frames_vs_ours']['max_levels']} levels"
        lines.append(
            f"| {name} | {r['side']} | {s['text']:.3g} | {s['denoise']:.3g} ({len(r['step_s'])} of {r['steps']}) "
            f"| {s['decode']:.3g} | {s['total']:.3g} | {r['scaled']['total']:.4g} | {peaks} | {ratio} | {note} |"
        )
    return "\n".join(lines) + "\n"


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.video", description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="every row on CPU with the tiny model and tiny sizes")
    p.add_argument("--device", default="cuda")
    p.add_argument("--budget-s", type=float, default=540.0, help="the whole table's seconds (rows skipped past it)")
    p.add_argument("--rows", nargs="+", choices=[r.name for r in RECIPES], help="only these recipes")
    p.add_argument("--json", help="write every figure here (rewritten after each row)")
    p.add_argument("--md", dest="markdown", help="write the BENCHMARKS.md rows here")
    args = p.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if not args.budget_s > 0:
        raise SystemExit(f"--budget-s {args.budget_s:g}: give the seconds the table may take, e.g. 540")
    return args


def main(argv=None) -> dict:
    args = parse(argv)

    def write(doc):
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1, default=str))

    doc = run(args, on_row=write)
    write(doc)
    text = markdown(doc)
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(text)
    return doc


if __name__ == "__main__":
    main()
