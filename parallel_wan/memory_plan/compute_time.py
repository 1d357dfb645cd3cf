"""How long a job will take on a device, roughly, before it starts: its FLOPs (counted, not
guessed: measure/flops.py for every transformer forward, measure/vae_flops.py for the decode)
over the device's measured matrix-multiply speed (backends/device_facts.py) at the share of it a
video model reaches (EFFICIENCY).

Why: a video far beyond what the device can do in reasonable time (a 401-frame 512² video on a
laptop CPU: hours per step) otherwise looks like a hang. The run logs the estimate when it is
long, and warns when it is very long; `python -m parallel_wan.plan` always prints it.

Cheap first: the FLOPs are arithmetic; the device is measured (a fraction of a second) only when
the job would be long even at the fastest speed such a device has (OPTIMISTIC_FLOPS), so a
normal start never pays for the measurement.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..backends.device_facts import DeviceSpeed
from ..config import RunSpec
from ..measure.flops import forward_flops
from ..measure.vae_flops import decode_flops
from .denoise_bytes import rank_shapes

# The share of the measured dense-GEMM speed (backends/device_facts.py) a whole job reaches, per
# kind of device. A GPU/TPU: one H200's compiled A14B forward ran at 66–68 % of its GEMM peak, eager
# lower (BENCHMARKS.md "GPU acceptance"). A CPU: the tiny model's runs on this project's 2-core
# machine took 0.5–1.5× the time their FLOPs need at the bf16 GEMM probe's rate (its attention and
# fp32 VAE convolutions do better than a bf16 GEMM without AVX-512 BF16 does; BENCHMARKS.md "Job
# time estimate"). The estimate is for the order of magnitude, not the minute.
EFFICIENCY = {"accelerator": 0.5, "cpu": 1.0}
# The most FLOP/s any device of a kind could give (per device): an accelerator's dense bf16 peak
# (B200: 2.25e15) rounded up; a CPU core's fp32 FMA peak (2 AVX-512 FMA units × 16 × 2 × 3.5 GHz).
OPTIMISTIC_FLOPS = {"accelerator": 2.5e15, "cpu_core": 2.3e11}
PROBE_AFTER_S = 60  # the device is measured only for a job that takes this long even at OPTIMISTIC_FLOPS
LOG_AFTER_S = 10 * 60  # a job estimated longer than this is announced (INFO)
WARN_AFTER_S = 3600  # and longer than this, warned about


@dataclass(frozen=True)
class JobFlops:
    forwards: int  # transformer forwards of one rank (its rows batched in each)
    denoise: int  # their FLOPs
    decode: int  # the VAE decode's FLOPs on one rank (its band of every video)
    videos: int

    @property
    def total(self) -> int:
        return self.denoise + self.decode


def job_flops(spec: RunSpec, tcfg, vcfg) -> JobFlops:
    """FLOPs of one rank (or one device of a JAX mesh) for this generation: every step's forward
    on the rank's tokens and rows (CFG on or off per step, as the step plan decides; a step
    cache's skips are not subtracted: this is the dense run) and its share of the decode."""
    from ..models.experts import LOW
    from ..parallel.cfg_rows import guides
    from ..pipeline.steps import expert_for
    from ..sampling import explicit_schedule, make_schedule

    shapes = rank_shapes(spec, tcfg, vcfg)
    s = spec.sampling
    if s.sigmas is not None or s.timesteps is not None:
        timesteps = explicit_schedule(s.sampler, s.sigmas, s.timesteps).timesteps
    else:
        timesteps = make_schedule("official", s.steps, s.shift).timesteps
    per_token = spec.model.variant.per_token_timestep
    denoise = 0
    for t in timesteps:
        guidance = s.guidance_low if expert_for(float(t), spec) == LOW else s.guidance_high
        halves = shapes.halves if guides(guidance) else 1
        denoise += forward_flops(
            tcfg, shapes.local, shapes.batch * halves, key_tokens=shapes.tokens, per_token_timestep=per_token
        ).total
    _, _, frames, height, width = shapes.latent_shape
    bands = min(spec.mesh.world_size, height)
    prompts = len(spec.video.prompts)
    decode = decode_flops(vcfg, frames, -(-height // bands), width, videos=prompts)
    return JobFlops(len(timesteps), denoise, decode, prompts)


def optimistic_seconds(flops: JobFlops, spec: RunSpec) -> float:
    """The job's time at the fastest speed a device of its kind has: a lower bound."""
    if _on_cpu(spec):
        cores = max(1, (os.cpu_count() or 1) // max(1, _processes_per_host(spec)))
        return flops.total / (OPTIMISTIC_FLOPS["cpu_core"] * cores)
    return flops.total / OPTIMISTIC_FLOPS["accelerator"]


def estimate_seconds(flops: JobFlops, device_flops: float, cpu: bool = False) -> float:
    return flops.total / (device_flops * EFFICIENCY["cpu" if cpu else "accelerator"])


def duration(seconds: float) -> str:
    """'0.3 s', '40 s', '12 min', '3.5 h', '6 days'."""
    if seconds < 0.01:
        return "under 0.01 s"
    if seconds < 10:
        return f"{seconds:.1g} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def amount(flops: float) -> str:
    """'3.2 GFLOP', '228 TFLOP', '65.4 PFLOP'."""
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if flops >= size:
            value = flops / size
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
    return f"{flops:.3g} FLOP"


def describe(flops: JobFlops, speed: DeviceSpeed) -> str:
    """One line: the work, the device's speed, the estimate."""
    share = EFFICIENCY["cpu" if speed.cpu else "accelerator"]
    return (
        f"about {duration(estimate_seconds(flops, speed.flops, speed.cpu))} on {speed.name} "
        f"({amount(flops.total)} per device: {flops.forwards} transformer steps {amount(flops.denoise)} + VAE "
        f"decode {amount(flops.decode)}, at {share:.0%} of the {speed.flops / 1e12:.3g} TFLOP/s its "
        "matrix multiplies reach)"
    )


def _on_cpu(spec: RunSpec) -> bool:
    device = spec.execution.device
    if device == "cpu":
        return True
    if device.startswith(("cuda", "tpu", "gpu")):
        return False
    from ..backends.device_facts import accelerator_present

    return not accelerator_present(spec.execution.backend)


def _processes_per_host(spec: RunSpec) -> int:
    if not capabilities(spec.execution.backend).processes_share_host:
        return 1
    from ..backends.device_facts import cpu_sharers

    return cpu_sharers(spec.execution.backend)


def job_estimate(specs, tcfg, vcfg, measure=None) -> tuple[str, bool] | None:
    """(the line to log, whether it is a warning) for the generations `specs` of one job, or
    None when it is estimated within LOG_AFTER_S. The device is measured only when even its
    kind's fastest would need over PROBE_AFTER_S. `measure`: () → DeviceSpeed (default:
    backends/device_facts.py's probe)."""
    specs = list(specs)
    parts = [job_flops(s, tcfg, vcfg) for s in specs]
    total = JobFlops(
        sum(p.forwards for p in parts),
        sum(p.denoise for p in parts),
        sum(p.decode for p in parts),
        sum(p.videos for p in parts),
    )
    if sum(optimistic_seconds(p, s) for p, s in zip(parts, specs)) <= PROBE_AFTER_S:
        return None
    if measure is None:
        from ..backends.device_facts import measure_device

        def measure():
            return measure_device(specs[0].execution.backend, specs[0].execution.device, specs[0].execution.dtype)

    speed = measure()
    seconds = estimate_seconds(total, speed.flops, speed.cpu)
    if seconds <= LOG_AFTER_S:
        return None
    line = "this job will take " + describe(total, speed)
    if seconds > WARN_AFTER_S:
        line += (
            "; far beyond a quick run — stop it now (Ctrl-C) and try fewer steps, a smaller "
            "num_frames/height/width, or more devices (python -m parallel_wan.plan shows the estimate)"
        )
    return line, seconds > WARN_AFTER_S


__all__ = [
    "EFFICIENCY",
    "DeviceSpeed",
    "JobFlops",
    "describe",
    "duration",
    "estimate_seconds",
    "job_estimate",
    "job_flops",
]
