"""Few-step generation: explicit schedules (`sigmas=` / `timesteps=`) equal diffusers' schedulers
handed the same values; the Lightning recipe (Euler, 4 steps, its sigmas, guidance 1.0) runs one
forward row per step, records its plan, renders diffusers' frames on tiny T2V and I2V, and every
mesh renders the one-device video; guidance 1.0 on one expert only (mixed) equals diffusers
with CFG computed where it is on; bad input stops in one line before anything loads."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from harness.cli import HEIGHT, WIDTH, common
from harness.diffusers_reference import reference_frames, tiny_checkpoint
from harness.frames import assert_frames_close, assert_same_video
from harness.images import write_png
from harness.jax_runs import generate
from harness.ranks import generate_on_rank

from parallel_wan.config import ConfigError, resolve
from parallel_wan.config.compose import compose_settings
from parallel_wan.config.few_step import LIGHTNING_SIGMAS
from parallel_wan.run import CONF_DIR
from parallel_wan.sampling import explicit_schedule

REPO = os.path.dirname(CONF_DIR)
OTHER_SIGMAS = (0.97, 0.8, 0.41, 0.05)  # no special values: every rounding shows
TIMESTEPS = (1000.0, 937.5, 833.3, 625.0)


def raw(*overrides, world_size=1):
    return compose_settings(list(overrides)) | {"output_dir": "/tmp/unused"}


def spec_for(*overrides, world_size=1):
    return resolve(raw(*overrides), world_size)


# ---------------------------------------------------------------- schedules
@pytest.mark.parametrize("sigmas", [LIGHTNING_SIGMAS, OTHER_SIGMAS])
def test_euler_sigmas_equal_flow_match_euler(sigmas):
    from diffusers import FlowMatchEulerDiscreteScheduler

    ref = FlowMatchEulerDiscreteScheduler(shift=1.0)  # explicit values are not shifted again
    ref.set_timesteps(sigmas=list(sigmas))
    ours = explicit_schedule("euler", sigmas=sigmas)
    assert np.array_equal(ours.sigmas, ref.sigmas.numpy().astype(np.float64))
    assert np.array_equal(ours.timesteps, ref.timesteps.numpy().astype(np.float64))


def test_euler_timesteps_equal_flow_match_euler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    ref = FlowMatchEulerDiscreteScheduler(shift=1.0)
    ref.set_timesteps(timesteps=list(TIMESTEPS))
    ours = explicit_schedule("euler", timesteps=TIMESTEPS)
    assert np.array_equal(ours.timesteps, np.float32(TIMESTEPS))  # as given (in float32), not truncated
    assert np.array_equal(ours.sigmas, ref.sigmas.numpy().astype(np.float64))
    assert np.array_equal(ours.timesteps, ref.timesteps.numpy().astype(np.float64))


@pytest.mark.parametrize("sigmas", [LIGHTNING_SIGMAS, OTHER_SIGMAS])
def test_unipc_sigmas_equal_diffusers_unipc(sigmas):
    from diffusers import UniPCMultistepScheduler

    ref = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=1.0)
    ref.set_timesteps(sigmas=np.asarray(sigmas))
    ours = explicit_schedule("unipc", sigmas=sigmas)
    assert np.array_equal(ours.sigmas, ref.sigmas.numpy().astype(np.float64))  # σ₀ = 1 nudged as diffusers does
    assert np.array_equal(ours.timesteps, ref.timesteps.numpy())


def test_lightning_recipe_is_the_lightning_schedule():
    from diffusers import FlowMatchEulerDiscreteScheduler

    from parallel_wan.pipeline.steps import pick_schedule, step_plan

    # lightx2v/Wan2.2-Lightning's EulerScheduler, its float32 arithmetic redone: linspace(1000, 0,
    # 5) / 1000, shifted by 5, × 1000, the final 0 dropped from the timesteps.
    t = torch.from_numpy(np.linspace(1000, 0, 5, dtype=np.float32))
    s = t / 1000
    s = 5.0 * s / (1 + (5.0 - 1) * s)
    for preset, extra in (("tiny_lightning", []), ("wan2.2_t2v_a14b_lightning", ["checkpoint_dir=/tmp"])):
        spec = spec_for(f"model={preset}", *extra)
        assert (
            spec.sampling.sampler,
            spec.sampling.steps,
            spec.sampling.shift,
            spec.sampling.guidance_high,
            spec.sampling.guidance_low,
        ) == ("euler", 4, 5.0, 1.0, 1.0)
        kind, schedule = pick_schedule(spec, None)
        assert kind == "sigmas"
        assert np.array_equal(schedule.timesteps, (s * 1000).numpy()[:-1])
        assert np.array_equal(schedule.sigmas, s.numpy())
        assert [p.expert for p in step_plan(spec, schedule)] == ["high_noise"] * 2 + ["low_noise"] * 2
    # … and diffusers' Euler at shift 5 handed the unshifted ramp gives the same numbers
    ref = FlowMatchEulerDiscreteScheduler(shift=5.0)
    ref.set_timesteps(sigmas=[1.0, 0.75, 0.5, 0.25])
    assert np.array_equal(ref.timesteps.numpy(), (s * 1000).numpy()[:-1])
    # recipe=lightning on any model; the command line still wins
    spec = spec_for("model=tiny", "recipe=lightning", "guidance_low=3")
    assert (spec.sampling.sigmas, spec.sampling.guidance_high, spec.sampling.guidance_low, spec.sampling.recipe) == (
        LIGHTNING_SIGMAS,
        1.0,
        3.0,
        "lightning",
    )


# ---------------------------------------------------------------- bad input
def one_line(overrides, words, world_size=1):
    with pytest.raises(ConfigError) as err:
        spec_for(*overrides, world_size=world_size)
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["sigmas=[0.5,0.9]"], ["sigmas=[0.5, 0.9]", "decrease strictly"]),
        (["sigmas=[0.9,0.9]"], ["decrease strictly"]),
        (["sigmas=[1.5,0.5]"], ["sigmas=[1.5, 0.5]", "(0, 1]"]),
        (["sigmas=[0.5,0.0]"], ["(0, 1]", "appended"]),
        (["timesteps=[1200,500]"], ["timesteps=[1200.0, 500.0]", "(0, 1000]"]),
        (["sigmas=[]"], ["non-empty list"]),
        (["sigmas=[1.0,0.5]", "timesteps=[1000,500]"], ["sigmas=[…] and timesteps=[…]", "one of them"]),
        (["sigmas=[1.0,0.5]", "steps=3"], ["steps=3", "2 sigmas", "drop steps="]),
        (["model=tiny_lightning", "steps=8"], ["steps=8", "4 sigmas", "model preset"]),
        (["recipe=turbo"], ["recipe='turbo'", "lightning"]),
        # one set of JAX cache arrays serves both experts' programs: their rows must agree
        (["backend=jax", "cache=fbcache", "guidance_high=1.0"], ["cache=fbcache", "backend=jax", "backend=torch"]),
    ],
)
def test_bad_schedules_stop_in_one_line(overrides, words):
    one_line(overrides, words)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["mesh=dp2", "guidance_high=1.0"], ["mesh=dp2", "guidance_high=1.0", "high-noise", "mesh=cp2"]),
        (["mesh=dp2", "guidance_low=1.0"], ["guidance_low=1.0", "low-noise", "mesh=cp2"]),
        (["mesh=dp2", "model=tiny_lightning"], ["dp=2", "guidance on"]),  # no CFG at all: the old rule
    ],
)
def test_cfg_parallel_with_guidance_off_is_refused(overrides, words):
    one_line(overrides, words, world_size=2)


def test_cfg_parallel_still_takes_prompts_with_guidance_off():
    spec = spec_for("mesh=dp2", "model=tiny_lightning", "prompt=['a','b']", world_size=2)
    assert spec.mesh.dp == 2 and not spec.uses_guidance


@pytest.mark.parametrize("bad", [["sigmas=[0.5,0.9]"], ["sigmas=[1.0,0.5]", "timesteps=[1000,500]"]])
def test_bad_schedule_writes_nothing(tmp_path, bad):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", *bad],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parallel_wan: error:"), proc.stderr
    assert not out.exists()


# ---------------------------------------------------------------- runs against diffusers
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {kind: tiny_checkpoint(kind, tmp_path_factory) for kind in ("t2v", "i2v")}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return write_png(tmp_path_factory.mktemp("image") / "first.png", WIDTH, HEIGHT)


def run_counting_rows(monkeypatch, out, *overrides):
    """An in-process run (outputs written as the CLI writes them) that records the rows of every
    transformer forward and of the text context it reads."""
    from parallel_wan.models import transformer
    from parallel_wan.run import run, validate_job

    rows = []
    forward = transformer.forward

    def counting(params, x, timestep, context, *args, **kwargs):
        rows.append((x.shape[0], context.shape[0]))
        return forward(params, x, timestep, context, *args, **kwargs)

    monkeypatch.setattr(transformer, "forward", counting)
    cfg = raw(*overrides) | {"output_dir": str(out)}
    job, ckpt = validate_job(cfg, 1)
    spec = job.base
    run(spec, ckpt)
    return rows, json.loads((out / "video.json").read_text()), np.load(out / "frames.npy")


def reference(model, sigmas, guidance_high, guidance_low, image=None):
    """diffusers' frames with FlowMatchEulerDiscreteScheduler (shift 1) handed our sigmas, as
    `retrieve_timesteps(sigmas=…)` hands them (the Wan pipelines take a step count only). CFG is
    computed on every step when any expert guides — at scale 1.0 it is the cond prediction up
    to rounding — since diffusers decides it once, from guidance_scale alone."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    class Explicit(FlowMatchEulerDiscreteScheduler):
        def set_timesteps(self, num_inference_steps=None, device=None, **kwargs):
            super().set_timesteps(device=device, sigmas=list(sigmas))

    return reference_frames(
        model,
        image,
        steps=len(sigmas),
        scheduler=Explicit(shift=1.0),
        cfg_on=guidance_high != 1.0 or guidance_low != 1.0,
        guidance_scale=guidance_high,
        guidance_scale_2=guidance_low,
    )


def overrides_for(ckpt, model, *extra):
    return [*common(ckpt, steps=4), f"model={model}", *extra]


@pytest.mark.parametrize("kind", ["t2v", "i2v"])
def test_lightning_run_is_one_row_per_step_and_equals_diffusers(checkpoints, image, kind, tmp_path, monkeypatch):
    model, ckpt = checkpoints[kind]
    preset = "tiny_lightning" if kind == "t2v" else "tiny_i2v_lightning"
    extra = [] if kind == "t2v" else [f"image={image}"]
    rows, sidecar, frames = run_counting_rows(monkeypatch, tmp_path / "ours", *overrides_for(ckpt, preset, *extra))
    assert rows == [(1, 1)] * 4  # 4 forwards, one prompt row each; the context holds no negative prompt
    assert sidecar["timesteps"] == [1000.0, 937.5, float(np.float32(5 / 6) * np.float32(1000)), 625.0]
    assert sidecar["schedule"] == "sigmas" and sidecar["sigmas"][-1] == 0.0
    assert [s["expert"] for s in sidecar["steps_plan"]] == ["high_noise"] * 2 + ["low_noise"] * 2
    assert [(s["guidance"], s["cfg"]) for s in sidecar["steps_plan"]] == [(1.0, False)] * 4
    assert sidecar["config"]["recipe"] == "lightning" and sidecar["config"]["sampler"] == "euler"
    assert_frames_close(frames, reference(model, LIGHTNING_SIGMAS, 1.0, 1.0, image if kind == "i2v" else None))


def test_mixed_guidance_runs_cfg_where_it_is_on_and_equals_diffusers(checkpoints, tmp_path, monkeypatch):
    model, ckpt = checkpoints["t2v"]
    rows, sidecar, frames = run_counting_rows(
        monkeypatch, tmp_path / "ours", *overrides_for(ckpt, "tiny_lightning", "guidance_low=3")
    )
    assert rows == [(1, 1)] * 2 + [(2, 2)] * 2  # high noise: cond only; low noise: cond + negative
    assert [s["cfg"] for s in sidecar["steps_plan"]] == [False, False, True, True]
    assert_frames_close(frames, reference(model, LIGHTNING_SIGMAS, 1.0, 3.0))


def test_step_cache_with_guidance_off_on_one_expert(tmp_path, monkeypatch):
    # First-Block Cache probing every step: high-noise steps run the cond branch only (their
    # uncond column is "not run"), and the dense count is what the run would do without a cache.
    rows, sidecar, _ = run_counting_rows(
        monkeypatch,
        tmp_path / "ours",
        "cache=fbcache",
        "cache.threshold=0.5",
        "guidance_high=1.0",
        "steps=6",
        "dtype=float32",
        "num_frames=5",
        "height=32",
        "width=32",
        "save_frames=true",
    )
    high, layers = sidecar["steps_per_expert"]["high_noise"], 2  # the tiny model's blocks
    assert 0 < high < 6
    assert sidecar["cache"]["block_forwards_dense"] == layers * (high + 2 * (6 - high))
    assert all(step >= high for step in sidecar["cache"]["skipped"]["uncond"])
    assert [r[0] for r in rows[:high]] == [1] * high


# ---------------------------------------------------------------- meshes
LIGHT = [
    "model=tiny_lightning",
    "dtype=float32",
    "num_frames=9",
    "seed=3",
    "prompt='a dog jumps'",
    "height=48",
    "width=48",
]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_four_torch_ranks_equal_one_device():
    # The Lightning schedule with CFG on the low-noise expert only: one row per forward in the
    # high-noise steps, two in the low-noise ones, on ulysses 2 × ring 2 (27 tokens, padded).
    from harness.ranks import run_on_ranks

    mixed = LIGHT + ["guidance_low=3"]
    ref = run_on_ranks(generate_on_rank, 1, mixed, timeout_s=300)[0]
    assert_same_video(run_on_ranks(generate_on_rank, 4, mixed + ["mesh=usp2x2"], timeout_s=300)[0], ref)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_jax_meshes_and_scan_equal_one_device(monkeypatch):
    # Mixed guidance: the high-noise expert's program has one row per prompt and a context of
    # the prompts alone, the low-noise expert's both CFG halves; the scanned loop picks per step.
    from harness.jax_devices import rel_err, require_eight_devices

    require_eight_devices()
    mixed = LIGHT + ["guidance_low=3", "backend=jax"]
    ref = generate(mixed + ["mesh=single"], decode=False, monkeypatch=monkeypatch)[0]
    assert ref.info["steps_plan"][0]["cfg"] is False and ref.info["steps_plan"][-1]["cfg"] is True
    for extra in (["mesh=ring8"], ["mesh=usp2x2", "scan_loop=true"]):
        gen = generate(mixed + extra, decode=False, monkeypatch=monkeypatch)[0]
        assert rel_err(gen.latents, ref.latents) <= 1e-5, extra
    torch_ref = generate([o for o in mixed if o != "backend=jax"], decode=False, monkeypatch=monkeypatch)[0]
    assert rel_err(ref.latents, torch_ref.latents) <= 1e-4  # XLA and torch sum in other orders
