"""`python -m parallel_wan.plan key=value … device_memory_gb=N`: compose the run's Hydra config,
validate it as the run does, print the plan; exit 0 fits, 1 does not fit, 2 a bad setting."""

from __future__ import annotations

import dataclasses

from ..config import ConfigError, RunSpec, resolve
from .report import plan, report


def main(argv: list[str]) -> int:
    from ..cli import front
    from ..config.compose import compose_settings
    from ..entry.endings import refusal

    overrides, budget, tflops = [], None, None
    for arg in front("plan", argv):
        if arg.startswith("device_memory_gb="):
            budget = arg.split("=", 1)[1]
        elif arg.startswith("device_tflops="):
            tflops = arg.split("=", 1)[1]
        else:
            overrides.append(arg)
    try:
        if budget is None:
            raise ConfigError(
                "device_memory_gb is missing; give the memory of one device, e.g. device_memory_gb=80 "
                "(python -m parallel_wan.plan --help)"
            )
        try:
            budget = float(budget)
        except ValueError:
            raise ConfigError(f"device_memory_gb={budget!r} is not a number; give e.g. device_memory_gb=80") from None
        if budget <= 0:
            raise ConfigError(f"device_memory_gb={budget:g} must be positive, e.g. device_memory_gb=80")
        if tflops is not None:
            try:
                tflops = float(tflops)
            except ValueError:
                raise ConfigError(
                    f"device_tflops={tflops!r} is not a number; give the dense bf16 TFLOP/s of the "
                    "device the job will run on, e.g. device_tflops=989 (H100 SXM)"
                ) from None
            if not 0 < tflops < float("inf"):
                raise ConfigError(f"device_tflops={tflops:g} must be a positive number, e.g. device_tflops=989")
        text, fits = plan_report(compose_settings(overrides), budget, tflops)
    except ConfigError as exc:
        return refusal(exc, "parallel_wan.plan")
    print(text)
    return 0 if fits else 1  # scripts can branch on it; a bad setting is 2


def plan_report(raw: dict, budget_gb: float, device_tflops: float | None = None, measure=None) -> tuple[str, bool]:
    """(the plan as printed, whether it fits in `budget_gb`) for composed settings `raw`, on the
    world its mesh names, with the job's compute and how long it takes on this machine's device
    (measured: `measure` () → DeviceSpeed, default backends/device_facts.py) and, given
    `device_tflops` (a device's dense TFLOP/s), on that device. Raises ConfigError for a bad setting."""
    raw = {**raw, "output_dir": "unused"}
    mesh = raw.get("mesh") or {}
    world = int(mesh.get("dp", 1)) * int(mesh.get("cp", 1)) if str(mesh.get("dp", 1)).isdigit() else 1
    p = plan(planning_spec(raw, world))
    text, fits = report(p, budget_gb)
    return text + "\n" + time_lines(p.spec, device_tflops, measure), fits


def time_lines(spec: RunSpec, device_tflops: float | None = None, measure=None) -> str:
    """The compute of one device for the job, and its time here (and on a named device)."""
    from .architecture import architecture
    from .compute_time import EFFICIENCY, describe, duration, estimate_seconds, job_flops

    tcfg, vcfg, _ = architecture(spec)
    flops = job_flops(spec, tcfg, vcfg)
    if measure is None:
        from ..backends.device_facts import measure_device

        def measure():
            return measure_device(spec.execution.backend, spec.execution.device, spec.execution.dtype)

    lines = ["time (dense, no step cache): " + describe(flops, measure())]
    if device_tflops is not None:
        seconds = estimate_seconds(flops, device_tflops * 1e12)
        lines.append(
            f"  at device_tflops={device_tflops:g}: about {duration(seconds)} "
            f"({EFFICIENCY['accelerator']:.0%} of {device_tflops:g} TFLOP/s)"
        )
    return "\n".join(lines)


def planning_spec(raw: dict, world: int) -> RunSpec:
    """`config.resolve` for planning: no weights are read, so a preset without checkpoint_dir
    is fine (its architecture is known), and no image either (an image-to-video plan needs the
    video's size, not its first frame); every other check is the run's."""
    from ..config.placeholder_image import placeholder_image

    model = dict(raw["model"])
    builtin = bool(model.get("builtin", False))
    with placeholder_image(raw) as image:
        spec = resolve({**raw, **image, "model": {**model, "builtin": True}}, world)
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, builtin=builtin))
