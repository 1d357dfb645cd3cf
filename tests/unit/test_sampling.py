"""Samplers and schedules against the two references: diffusers 0.42's UniPCMultistepScheduler
/ FlowMatchEulerDiscreteScheduler and the official Wan 2.2 FlowUniPCMultistepScheduler (PyPI
`wan22`, installed with `pip install --no-deps wan22==2.2.11`; only its scheduler file is loaded,
because importing the `wan` package needs flash_attn and CUDA)."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

from parallel_wan.backends.torch import ops
from parallel_wan.sampling import (
    count_high_noise_steps,
    is_high_noise_step,
    make_sampler,
    make_schedule,
    schedule_from_scheduler_config,
)
from parallel_wan.sampling.unipc import step_order

SETTINGS = [(12.0, 40), (5.0, 40), (12.0, 4), (5.0, 10), (5.0, 50)]
KINDS = ["official", "diffusers"]


# ---------------------------------------------------------------- references
@pytest.fixture(scope="module")
def official_module():
    spec = importlib.util.find_spec("wan")
    if spec is None or spec.origin is None:
        pytest.fail(
            "the official Wan 2.2 package is not installed; tests/unit/test_sampling.py compares "
            "against its scheduler. Install it with: pip install --no-deps wan22==2.2.11"
        )
    path = os.path.join(os.path.dirname(spec.origin), "utils", "fm_solvers_unipc.py")
    if not os.path.exists(path):
        pytest.fail(f"wan22 is installed but {path} is missing; reinstall wan22==2.2.11 with --no-deps.")
    file_spec = importlib.util.spec_from_file_location("_official_fm_solvers_unipc", path)
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module


def reference_scheduler(kind, steps, shift, official_module):
    """The scheduler exactly as each reference pipeline builds it."""
    if kind == "official":  # wan/text2video.py
        ref = official_module.FlowUniPCMultistepScheduler(num_train_timesteps=1000, shift=1, use_dynamic_shifting=False)
        ref.set_timesteps(steps, device="cpu", shift=shift)
    else:  # Wan 2.2 diffusers checkpoints, with the sampling shift set as users do
        ref = UniPCMultistepScheduler(
            prediction_type="flow_prediction",
            use_flow_sigmas=True,
            num_train_timesteps=1000,
            flow_shift=shift,
        )
        ref.set_timesteps(steps)
    ref.set_begin_index(0)
    return ref


def fake_velocity(x, t, w):
    """A deterministic nonlinear stand-in for the transformer; elementwise in x so that shards
    see exactly what the whole array sees (w is sliced along with x)."""
    return torch.tanh(x) * 0.7 + torch.sin(x * 1.3 + float(t) / 1000 * 3.0) * 0.4 + w * 0.5


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


def initial_latents(dtype, shape=(1, 16, 3, 8, 8)):
    g = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)


# ---------------------------------------------------------------- schedules
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shift,steps", SETTINGS)
def test_schedule_equals_reference(kind, shift, steps, official_module):
    # Tolerance 0: we repeat the references' float64 arithmetic and float32 rounding exactly.
    ref = reference_scheduler(kind, steps, shift, official_module)
    schedule = make_schedule(kind, steps, shift)
    assert schedule.timesteps.dtype == np.int64
    np.testing.assert_array_equal(schedule.timesteps, ref.timesteps.numpy())
    np.testing.assert_array_equal(schedule.sigmas, ref.sigmas.numpy().astype(np.float64))
    assert schedule.sigmas[-1] == 0.0 and len(schedule.sigmas) == steps + 1


def test_the_two_schedules_differ():
    a, b = make_schedule("official", 40, 12.0), make_schedule("diffusers", 40, 12.0)
    gap = np.abs(a.sigmas - b.sigmas).max()
    assert 0.007 < gap < 0.0075  # REFERENCE.md: "σ up to 0.007 apart at shift 12"


@pytest.mark.parametrize("shift,boundary,high,low", [(12.0, 0.875, 26, 14), (5.0, 0.900, 15, 25)])
def test_expert_split_official(shift, boundary, high, low, official_module):
    schedule = make_schedule("official", 40, shift)
    assert count_high_noise_steps(schedule, boundary) == high
    assert schedule.steps - high == low
    # Same rule as wan/text2video.py: t.item() >= boundary * num_train_timesteps.
    ref = reference_scheduler("official", 40, shift, official_module)
    expected = [t.item() >= boundary * 1000 for t in ref.timesteps]
    assert [is_high_noise_step(schedule, i, boundary) for i in range(40)] == expected


# ---------------------------------------------------------------- UniPC trajectories
def run_both(kind, shift, steps, dtype, official_module):
    """Free-running trajectories of the reference and of our UniPC; per-step relative errors."""
    ref = reference_scheduler(kind, steps, shift, official_module)
    if dtype == torch.float64:
        ref.sigmas = ref.sigmas.double()  # makes every reference scalar float64 too
    sampler = make_sampler("unipc", make_schedule(kind, steps, shift))
    state = sampler.initial_state()
    x, w = initial_latents(dtype)
    x_ref, errors = x.clone(), []
    for i, t in enumerate(ref.timesteps):
        x_ref = ref.step(fake_velocity(x_ref, t, w), t, x_ref, return_dict=False)[0]
        x, state = sampler.step(state, fake_velocity(x, t, w), x, i, ops)
        assert x.dtype == dtype
        errors.append(rel_err(x, x_ref))
    return errors


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shift,steps", SETTINGS)
def test_unipc_fp32_matches_reference_every_step(kind, shift, steps, official_module):
    # The references form the step coefficients (log-SNR differences, e^-h, the UniC solve)
    # in float32 torch scalars, we in float64; measured worst over 40 steps is 4.1e-7, so the
    # bound is 1e-6 (the float64 test below shows the remaining gap is only their rounding).
    errors = run_both(kind, shift, steps, torch.float32, official_module)
    assert max(errors) <= 1e-6, errors


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shift,steps", [(12.0, 40), (5.0, 40), (5.0, 10)])
def test_unipc_fp64_is_the_reference_math(kind, shift, steps, official_module):
    # With float64 arrays and float64 reference scalars only rounding order differs: measured
    # 7e-16 after 40 steps; 1e-13 leaves room for BLAS/libm differences between machines.
    errors = run_both(kind, shift, steps, torch.float64, official_module)
    assert max(errors) <= 1e-13, errors


def test_unipc_orders_and_final_step():
    # Warm-up at order 1, order 2 in between, order 1 into sigma 0 (lower_order_final).
    assert [step_order(i, 5) for i in range(5)] == [1, 2, 2, 2, 1]
    assert [step_order(i, 1) for i in range(1)] == [1]
    schedule = make_schedule("official", 4, 12.0)
    sampler = make_sampler("unipc", schedule)
    state = sampler.initial_state()
    x, w = initial_latents(torch.float32)
    for i, t in enumerate(schedule.timesteps):
        v = fake_velocity(x, t, w)
        x_in = x
        x, state = sampler.step(state, v, x, i, ops)
    # The last step returns the x0 prediction from the (uncorrected) sample, exactly.
    assert torch.equal(x, x_in - v * float(schedule.sigmas[-2]))


# ---------------------------------------------------------------- Euler
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shift,steps", [(12.0, 40), (5.0, 10)])
def test_euler_matches_diffusers_flow_match_euler(kind, shift, steps):
    # shift=1 and our sigmas passed in makes diffusers' schedule ours (its timesteps are then
    # float sigma*1000, so only the sigmas are shared). Bitwise: σ_next - σ is exact in float64
    # for float32 sigmas and rounds once to float32, as diffusers' float32 subtraction does.
    schedule = make_schedule(kind, steps, shift)
    ref = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
    ref.set_timesteps(sigmas=schedule.sigmas[:-1].tolist())
    np.testing.assert_array_equal(ref.sigmas.numpy().astype(np.float64), schedule.sigmas)
    ref.set_begin_index(0)
    sampler = make_sampler("euler", schedule)
    state = sampler.initial_state()
    x, w = initial_latents(torch.float32)
    x_ref = x.clone()
    for i, t in enumerate(ref.timesteps):
        x_ref = ref.step(fake_velocity(x_ref, t, w), t, x_ref, return_dict=False)[0]
        x, state = sampler.step(state, fake_velocity(x, t, w), x, i, ops)
        assert torch.equal(x, x_ref), i


def test_euler_hand_computation():
    schedule = make_schedule("official", 3, 5.0)
    sampler = make_sampler("euler", schedule)
    x = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    v = torch.tensor([0.25, 1.0, -3.0], dtype=torch.float64)
    s = schedule.sigmas
    expected = x.numpy() + (s[1] - s[0]) * v.numpy()
    out, state = sampler.step(sampler.initial_state(), v, x, 0, ops)
    np.testing.assert_array_equal(out.numpy(), expected)
    assert state == {}  # Euler keeps nothing between steps


# ---------------------------------------------------------------- sharding and explicit state
@pytest.mark.parametrize("name", ["unipc", "euler"])
def test_update_on_token_shards_equals_whole(name):
    # The orchestrator runs the update on each rank's token shard with a state of its own; the
    # update must be elementwise, so the concatenated shards equal the whole array bit for bit.
    schedule = make_schedule("official", 12, 12.0)
    sampler = make_sampler(name, schedule)
    state, states = sampler.initial_state(), [sampler.initial_state(), sampler.initial_state()]
    x, w = initial_latents(torch.float32, shape=(1, 64, 16))  # (batch, tokens, channels)
    sizes = [27, 37]  # uneven on purpose
    parts, w_parts = list(torch.split(x, sizes, dim=1)), torch.split(w, sizes, dim=1)
    for i, t in enumerate(schedule.timesteps):
        x, state = sampler.step(state, fake_velocity(x, t, w), x, i, ops)
        stepped = [sampler.step(s, fake_velocity(p, t, wp), p, i, ops) for s, p, wp in zip(states, parts, w_parts)]
        parts, states = [p for p, _ in stepped], [s for _, s in stepped]
        assert torch.equal(torch.cat(parts, dim=1), x), i


@pytest.mark.parametrize("name", ["unipc", "euler"])
@pytest.mark.parametrize("stop", [1, 2, 5])
def test_state_copied_after_any_step_resumes_the_same_trajectory(name, stop):
    # The state is everything a step needs from earlier steps: a deep copy of it taken after
    # `stop` steps continues exactly as the uninterrupted run.
    schedule = make_schedule("diffusers", 6, 5.0)
    sampler = make_sampler(name, schedule)
    x, w = initial_latents(torch.float32)
    state, saved = sampler.initial_state(), None
    for i, t in enumerate(schedule.timesteps):
        if i == stop:
            saved = (x.clone(), {k: None if v is None else v.clone() for k, v in state.items()})
        x, state = sampler.step(state, fake_velocity(x, t, w), x, i, ops)
    y, state = saved
    for i in range(stop, schedule.steps):
        y, state = sampler.step(state, fake_velocity(y, schedule.timesteps[i], w), y, i, ops)
    assert torch.equal(x, y)


def test_the_unipc_table_holds_every_step():
    # Rows are the references' step structure: no corrector at step 0, UniC-2 only after an
    # order-2 step, the last step returns x0.
    schedule = make_schedule("official", 5, 12.0)
    table = make_sampler("unipc", schedule).table
    assert all(v.dtype == np.float64 and v.shape == (5,) for v in table.values())
    assert table["corrects"].tolist() == [0, 1, 1, 1, 1]
    assert table["p_order2"].tolist() == [0, 1, 1, 1, 0]
    assert table["c_order2"].tolist() == [0, 0, 1, 1, 1]
    assert table["p_final"].tolist() == [0, 0, 0, 0, 1]
    np.testing.assert_array_equal(table["sigma"], schedule.sigmas[:-1])
    with pytest.raises(IndexError, match="step 5 is outside the schedule's 5 steps"):
        make_sampler("unipc", schedule).coefs(5)


def test_bf16_inputs_update_in_fp32_and_keep_sample_dtype():
    schedule = make_schedule("official", 4, 12.0)
    sampler = make_sampler("unipc", schedule)
    x, w = initial_latents(torch.float32)
    v = fake_velocity(x, schedule.timesteps[0], w)
    out, state = sampler.step(sampler.initial_state(), v.bfloat16(), x.bfloat16(), 0, ops)
    want, _ = sampler.step(sampler.initial_state(), v.bfloat16().float(), x.bfloat16().float(), 0, ops)
    assert out.dtype == torch.bfloat16 and torch.equal(out, want.bfloat16())
    assert state["last"].dtype == state["x0_prev"].dtype == torch.float32  # the state keeps fp32


def test_unknown_sampler_is_refused():
    with pytest.raises(ValueError, match="sampler 'dpm' is unknown"):
        make_sampler("dpm", make_schedule("official", 4, 5.0))


# ---------------------------------------------------------------- diffusers scheduler configs
def wan22_diffusers_config(flow_shift):
    """scheduler_config.json of the Wan 2.2 diffusers checkpoints, as diffusers'
    scripts/convert_wan_to_diffusers.py writes it (flow_shift 3.0 for A14B, 5.0 for TI2V-5B)."""
    sched = UniPCMultistepScheduler(
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
        num_train_timesteps=1000,
        flow_shift=flow_shift,
    )
    return json.loads(sched.to_json_string())


@pytest.mark.parametrize("file_shift,shift", [(3.0, None), (3.0, 12.0), (5.0, None)])
def test_schedule_from_scheduler_config(file_shift, shift):
    cfg = wan22_diffusers_config(file_shift)
    schedule = schedule_from_scheduler_config(cfg, 40, shift)
    ref = UniPCMultistepScheduler.from_config(cfg, flow_shift=shift or file_shift)
    ref.set_timesteps(40)
    np.testing.assert_array_equal(schedule.timesteps, ref.timesteps.numpy())
    np.testing.assert_array_equal(schedule.sigmas, ref.sigmas.numpy().astype(np.float64))
    assert schedule.kind == "diffusers" and schedule.shift == (shift or file_shift)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"prediction_type": "epsilon"}, "prediction_type='epsilon'"),
        ({"use_flow_sigmas": False}, "use_flow_sigmas=False"),
        ({"use_karras_sigmas": True}, "use_karras_sigmas=True"),
        ({"final_sigmas_type": "sigma_min"}, "final_sigmas_type='sigma_min'"),
        ({"solver_order": 3}, "solver_order=3"),
        ({"lower_order_final": False}, "lower_order_final=False"),
        ({"disable_corrector": [0]}, r"disable_corrector=\[0\]"),
        ({"use_dynamic_shifting": True}, "use_dynamic_shifting=True"),
        ({"_class_name": "FlowMatchEulerDiscreteScheduler"}, "FlowMatchEulerDiscreteScheduler"),
        ({"some_future_flag": 1}, "some_future_flag"),
    ],
)
def test_scheduler_configs_we_cannot_reproduce_are_refused(change, message):
    cfg = {**wan22_diffusers_config(3.0), **change}
    with pytest.raises(ValueError, match=message):
        schedule_from_scheduler_config(cfg, 40, 12.0)


def test_config_missing_flow_entries_gets_diffusers_defaults_and_is_refused():
    # diffusers' default prediction_type is epsilon: a bare config is not a flow scheduler.
    with pytest.raises(ValueError, match="prediction_type='epsilon'"):
        schedule_from_scheduler_config({"_class_name": "UniPCMultistepScheduler"}, 40)


def test_make_schedule_flags():
    base = make_schedule("diffusers", 10, 5.0)
    flagged = make_schedule("diffusers", 10, 5.0, final_sigmas_type="zero", solver_type="bh2")
    np.testing.assert_array_equal(base.sigmas, flagged.sigmas)
    with pytest.raises(ValueError, match="use_karras_sigmas=True"):
        make_schedule("diffusers", 10, 5.0, use_karras_sigmas=True)
    with pytest.raises(ValueError, match="only apply to kind='diffusers'"):
        make_schedule("official", 10, 5.0, final_sigmas_type="zero")
    with pytest.raises(ValueError, match="schedule kind 'karras' is unknown"):
        make_schedule("karras", 10, 5.0)
