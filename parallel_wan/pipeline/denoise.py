"""The denoising loop, once, backend-agnostic: the host decides each step's expert and guidance
(steps.py); the backend's noise predictor runs the forward (and the CFG combine); the sampler's
elementwise update runs on whatever layout the backend keeps the tokens in (a rank's shard, or
a global sharded array). The loop runs over an explicit `LoopState` (loop_state.py), so it can
start at any step and stop after any step. For the tests only, the loop has a hold point
(hold_point.py, PARALLEL_WAN_TEST_HOLD) where a test can keep a job at a known step while it acts."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..backends.contract import NoisePredictor
from ..config import RunSpec
from ..errors import NonFiniteLatents
from ..models import transformer as dit
from ..parallel.cfg_rows import halves_in_forward
from ..sampling import make_sampler
from .hold_point import decode_hold_point, hold_point
from .local_work import RankWork
from .loop_state import LoopState
from .steps import first_step, step_plan


@dataclass
class DenoiseTask:
    """What a backend needs to build its noise predictor (`backend.noise_predictor(task)` →
    `predict(expert, x, t, guidance)` → the guided prediction, float32, shaped like x)."""

    experts: dict  # name → (TransformerConfig, params placed on the backend)
    context: object  # (prompts + negatives, text_len, text_dim): every prompt, then the negative prompt(s)
    prompts: int
    work: RankWork
    grid: tuple[int, int, int]
    uses_guidance: bool
    per_token_timestep: bool  # TI2V-5B: one timestep per token (diffusers' expand_timesteps)
    cond_tokens: object | None = None  # I2V: (1, L, F) condition channels of this work's L tokens
    fixed_mask: np.ndarray | None = None  # TI2V image: (L, 1) host array, 0 where a token is held (t = 0)
    cache: object | None = None  # caching.CacheSettings when cache != none
    cache_plan: list | None = None  # caching.plan.CacheStep per step (None: no step cache)
    # Experts whose guidance is 1.0 (pipeline/steps.unguided_experts): their forwards run the
    # cond rows only. `uses_guidance` says whether any expert guides (the context then holds
    # the negative prompt after the prompts).
    unguided: frozenset = frozenset()
    negatives: int = 1  # the context's negative rows: one for every prompt, or each prompt's own (a batch)
    # Animate: this segment's models.animate_transformer.SegmentArrays (one row, the whole
    # sequence); the predictor makes the (cond, uncond) inputs with its weights and keeps its tokens'
    segment_inputs: object | None = None
    # sparse=radial|svg: config.sparse.SparseSettings, and the first step index that runs sparse
    # (the steps before it — the first sparse_dense_steps the loop runs — stay dense)
    sparse: object | None = None
    sparse_from_step: int = 0

    def halves(self, expert: str) -> int:
        """CFG halves in this controller's forward for `expert` (parallel/cfg_rows.py)."""
        return halves_in_forward(self.uses_guidance and expert not in self.unguided, self.work.cfg_branch)


def denoise(
    spec: RunSpec,
    schedule,
    x,
    predict,
    progress,
    ops,
    held=None,
    *,
    start: LoopState | None = None,
    stop_after: int | None = None,
    should_stop=None,
    watch=None,
) -> LoopState:
    """Run the steps of `schedule` on this controller's tokens (B prompts × L tokens) from the
    noise `x` — or, with `start`, from that state (x is then unused) — until `stop_after` steps
    are done (default: all). Returns the state after the last step run.

    `held` = (tokens, keep): TI2V's first-frame tokens and a (L, 1) device mask, 1 where
    denoised — held tokens are re-imposed before each step and once after the last.
    spec.execution.scan_loop (JAX) hands the whole range to the backend's one `lax.scan` program; it runs
    the same sampler update.

    `should_stop()` (a preemption vote that every rank answers alike: jobs/preemption.py) is
    asked after each step but the last; True ends the loop there, and the state returned is
    the one to save. The scanned loop is one program: it is not asked.

    `watch(steps_done, x, pred)` (every rank, after each step but the last, before the vote)
    sees the latents and the step's prediction: a server's progress preview
    (pipeline/preview.py). It may run collectives, which every rank then runs alike.
    """
    # The planner runs this loop on meta tensors (memory_plan/denoise_bytes.py): never held.
    meta = getattr(x if start is None else start.latents, "is_meta", False)
    holds = (None, None) if meta else (hold_point(), decode_hold_point())
    return _denoise(spec, schedule, x, predict, progress, ops, held, start, stop_after, should_stop, watch, *holds)


def _denoise(
    spec, schedule, x, predict, progress, ops, held, start, stop_after, should_stop, watch, hold, decode_hold
) -> LoopState:
    begin = first_step(spec, schedule)
    sampler = make_sampler(spec.sampling.sampler, schedule, begin)
    state = LoopState.begin(x, sampler, begin) if start is None else start
    stop = schedule.steps if stop_after is None else stop_after
    if not 0 <= state.step <= stop <= schedule.steps:
        raise ValueError(f"cannot run steps {state.step}..{stop} of a {schedule.steps}-step schedule")
    plan = step_plan(spec, schedule)
    # A step cache's arrays travel in the state (the scanned loop carries them too).
    cache = predict.cache
    if cache is not None:
        cache.load(state.cache)
    if spec.execution.scan_loop:
        latents, sampler_state = predict.run_steps(state.latents, state.sampler, plan, sampler, held, state.step, stop)
        if stop > state.step:  # one program ran every step: the check comes after it
            experts = "→".join(dict.fromkeys(plan[i].expert for i in range(state.step, stop)))
            check_finite(latents, ops, f"steps {state.step + 1}..{stop} of {schedule.steps} (scan_loop; {experts})")
        return LoopState(stop, latents, sampler_state, state.cache if cache is None else cache.state())
    x, sampler_state = state.latents, state.sampler
    hold_at = -1 if hold is None else hold.step  # unset: one integer compare per step
    for i in progress(range(state.step, stop)):
        if i == hold_at:
            hold.wait()
        step = plan[i]
        if i > state.step and step.expert != plan[i - 1].expert:  # the expert switch ends a phase
            check_finite(x, ops, f"step {i} of {schedule.steps} ({plan[i - 1].expert} expert)")
        predict.before_step(step)  # memory=swap moves weights here; a step cache begins its step
        if held is not None:
            x = ops.where(held[1] > 0, x, held[0])
        pred = predict(step.expert, x, step.t, step.guidance)
        x, sampler_state = sampler.update(sampler.coefs(i), sampler_state, pred, x, ops)
        if watch is not None and i + 1 < stop:
            watch(i + 1, x, pred)
        if should_stop is not None and i + 1 < stop and should_stop():
            stop = i + 1
            break
    if held is not None and stop == schedule.steps:
        x = ops.where(held[1] > 0, x, held[0])
    if stop > state.step:
        check_finite(x, ops, f"step {stop} of {schedule.steps} ({plan[stop - 1].expert} expert)")
    if decode_hold is not None and stop == schedule.steps:
        decode_hold.wait()
    return LoopState(stop, x, sampler_state, state.cache if cache is None else cache.state())


def check_finite(x, ops, where: str) -> None:
    """Stop when the latents hold NaN or ±inf — weights full of NaN, an overflow — instead of
    decoding noise into a video. Called once per expert phase (at the switch and at the end),
    never per step: one elementwise product and one sum, then the only host sync it costs.
    x·0 is 0 for every finite value and NaN for NaN or ±inf, so the sum cannot overflow.
    Each rank checks its own tokens; NaN weights reach every rank's tokens through attention."""
    if getattr(x, "is_meta", False):  # the planner runs this loop on meta tensors: no values
        return
    if not np.isfinite(float(ops.to_numpy(ops.sum(x * 0.0)))):
        raise NonFiniteLatents(
            f"the latents hold NaN or inf after {where}; stopped, nothing was written — "
            "check the checkpoint's weights (re-download it) and the guidance/shift settings"
        )


def compile_loop(spec: RunSpec, schedule, x, predict, ops, held=None) -> dict:
    """For a backend that compiles ahead (JAX): the predictor's programs with the real shapes —
    each expert's step, or with scan_loop the whole scanned loop — and the host loop's own
    array ops, so the timed loop compiles nothing. Returns {program: seconds}."""
    if spec.execution.scan_loop:
        sampler = make_sampler(spec.sampling.sampler, schedule, first_step(spec, schedule))
        return predict.compile(x, step_plan(spec, schedule), sampler, held)
    seconds = predict.compile(x)
    t0 = time.perf_counter()
    rehearse_loop(spec, schedule, x, ops, held, predict.shard)
    seconds["sampler_ops"] = time.perf_counter() - t0
    return seconds


def rehearse_loop(spec: RunSpec, schedule, x, ops, held=None, place=lambda a: a) -> None:
    """The host loop itself over every step on zeros, a zero prediction placed by `place` as
    the predictor places its output: the held tokens' `where` and the sampler update run once
    per step, so a backend that compiles each op on first use (JAX) compiles them here."""
    zero = ops.zeros_like(x)
    loop_spec = spec.replace(scan_loop=False)
    _denoise(
        loop_spec,
        schedule,
        zero,
        _Constant(place(zero)),
        lambda steps: steps,
        ops,
        held,
        None,
        None,
        None,
        None,
        None,
        None,
    )


class _Constant(NoisePredictor):
    """A predictor that returns one array whatever it is asked (the rehearsal's)."""

    def __init__(self, prediction):
        self.prediction = prediction

    def __call__(self, expert, x, t, guidance):
        return self.prediction


def draw_noise(spec: RunSpec, rows, latent_shape, backend, patch_size, draw: int = 0):
    """Patch tokens of each prompt's noise, drawn as the official code draws it: a CPU
    generator seeded with the prompt's seed, float32. Every rank draws the same full noise
    (cheap, on the host) and keeps its slice, so the video does not depend on the mesh.
    `draw`: the generator's draws before this one (Animate's segment k takes draw k from the
    one generator, as diffusers' pipeline does)."""
    import torch

    ops = backend.ops

    def noise_of(row):
        generator = torch.Generator("cpu").manual_seed(spec.video.seed_of(row))
        for _ in range(draw + 1):
            noise = torch.randn(latent_shape, generator=generator, dtype=torch.float32)
        return noise

    noise = [noise_of(r) for r in rows]
    return dit.patchify(backend.to_device(torch.cat(noise).numpy()), patch_size, ops)
