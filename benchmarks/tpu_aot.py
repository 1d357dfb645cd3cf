"""Per-chip memory of a real model on a TPU slice, from XLA's compile-time analysis (no TPU):

    python benchmarks/tpu_aot.py model=wan2.2_t2v_a14b [topology=v5p:2x2x2] [vae_effort=-1] [step_effort=-1] \
        [mesh=dp2_cp4 memory=…]

Builds the run's mesh on libtpu's compile-only devices of `topology`, compiles the denoising
step and the VAE decode (backends/jax/aot.py) and prints XLA's bytes per chip beside the
memory planner's (`python -m parallel_wan.plan`). These are the compiler's buffer assignment,
not a measurement on a TPU. vae_effort=-1 compiles the VAE with XLA's lowest optimisation
effort (a minute instead of many on 2 CPU cores; its buffers are those of that program);
step_effort=-1 does the same for the step (9 CPU-s instead of 41 for A14B); the default is
XLA's own. tests/gpu/test_tpu_aot.py uses the same functions, both at -1.
"""

from __future__ import annotations

import os
import sys
import time

# Compile-only use: no TPU is shared, so libtpu's one-process-per-host lock (taken by every
# JAX process that loads libtpu, and left by a concurrent one) must not stop this process.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

GB = 1e9


def run_spec(*overrides: str, world: int = 8):
    """The RunSpec `parallel_wan.plan` resolves for these overrides (backend=jax, dp2_cp4 by default)."""
    from parallel_wan import memory_plan as planner
    from parallel_wan.config.compose import compose_settings

    raw = compose_settings(["backend=jax", "mesh=dp2_cp4", *overrides]) | {"output_dir": "unused"}
    return planner.planning_spec(raw, world)


def shapes_of(spec):
    """(TransformerConfig, VaeConfig, one expert's flat param shapes, the VAE's): the preset's
    architecture as the planner reads it; no weights exist."""
    from parallel_wan import memory_plan as planner
    from parallel_wan.models.vae_shapes import param_shapes

    tcfg, vcfg, _ = planner.architecture(spec)
    return tcfg, vcfg, planner.transformer_shapes(tcfg), param_shapes(vcfg)


def compile_model(spec, devices, vae_effort: float | None = None, step_effort: float | None = None) -> dict:
    """Every program of `spec` compiled for `devices`, the planner's plan and the per-chip phases."""
    from parallel_wan import memory_plan as planner
    from parallel_wan.backends.jax import aot

    tcfg, vcfg, tshapes, vshapes = shapes_of(spec)
    programs = aot.compile_generation(
        spec, tcfg, vcfg, tshapes, vshapes, devices, vae_effort=vae_effort, step_effort=step_effort
    )
    t0 = time.perf_counter()
    plan = planner.plan(spec)
    return {
        "spec": spec,
        "programs": programs,
        "plan": plan,
        "chip": aot.chip_bytes(programs, spec.model.experts),
        "tcfg": tcfg,
        "plan_seconds": time.perf_counter() - t0,
    }


def report(result: dict, topology: str) -> str:
    """XLA's compile-time memory analysis per chip beside the planner's figures."""
    from parallel_wan.backends.jax import aot

    spec, programs, plan, chip = result["spec"], result["programs"], result["plan"], result["chip"]
    step, decode = programs["step"].memory(), programs["vae_decode"].memory()
    vae = programs["vae_decode"]
    rows = [
        ("one expert's weights (step arguments)", aot.per_device_bytes(programs["params"]), plan.expert.whole),
        ("step temporaries | planner: loop activations", step["temp"], plan.denoise.loop),
        ("VAE decode temporaries | planner: decode activations", decode["temp"], plan.vae.peak),
        ("denoise phase, per chip", chip["denoise"], plan.phases["denoise"]),
        ("VAE decode phase, per chip", chip["vae decode"], plan.phases["vae decode"]),
    ]
    lines = [
        f"{spec.model.name} {spec.video.width}x{spec.video.height}x{spec.video.num_frames} "
        f"dtype={spec.execution.dtype} mesh={spec.mesh.name} "
        f"memory={spec.memory.mode} on {topology}: step compiled in {programs['step'].seconds:.0f} s "
        f"(effort {_effort(programs['step'].effort)}), {vae.name} in {vae.seconds:.0f} s (effort "
        f"{_effort(vae.effort)}); planner "
        f"{result['plan_seconds']:.0f} s",
        f"  {'':<54} {'XLA':>9} {'planner':>9}",
    ]
    lines += [f"  {name:<54} {xla / GB:7.2f}GB {planned / GB:7.2f}GB" for name, xla, planned in rows]
    lines.append(
        f"  generated code: step {step['generated_code'] / 1e6:.1f} MB, decode {decode['generated_code'] / 1e6:.1f} MB"
    )
    return "\n".join(lines)


def _effort(effort: float | None) -> str:
    return "default" if effort is None else f"{effort:g}"


def main(argv: list[str]) -> None:
    from parallel_wan.backends.jax import aot

    options = {"topology": "v5p:2x2x2", "vae_effort": None, "step_effort": None}
    overrides = []
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in options:
            options[key] = value
        else:
            overrides.append(arg)
    effort = {k: None if options[k] in (None, "default") else float(options[k]) for k in ("vae_effort", "step_effort")}
    devices = aot.topology_devices(options["topology"])
    spec = run_spec(*overrides, world=len(devices))
    print(report(compile_model(spec, devices, **effort), options["topology"]))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main(sys.argv[1:])
