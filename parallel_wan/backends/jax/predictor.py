"""The JAX backend's noise prediction: one jitted program per expert, compiled once, on the
global token array.

A single controller holds the whole problem: tokens (B, cp·Lc, F) padded at the end and
sharded ("dp", ring × ulysses); the forward batch is [cond rows…, uncond rows…] (the one CFG
layout, parallel/cfg_rows.py), sharded over "dp" — so with one prompt and dp = 2 the two CFG
halves run on the two dp groups. An expert whose guidance is 1.0 has a program of its own with
the cond rows only (task.halves), reading a context of the prompts alone. The CFG combine runs
inside the program; the host only passes the step's timestep and guidance scale (traced scalars, so
one compiled program serves every step, and both experts when their shapes agree).
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from ...models import animate_transformer as animate, s2v_tokens, s2v_transformer as s2v, transformer as dit
from ...models.animate_motion import motion_basis
from ...models.rope import rope_tables
from ...parallel.cfg_rows import branch_names
from ...pipeline import model_inputs
from ..contract import NoisePredictor
from . import ops, placement
from .cached_blocks import BlockCache, CacheSpec
from .cached_step import STEP_NAME, cached_step
from .programs import cached_program, mesh_key
from .scan_loop import ScannedLoop
from .sequence_parallel import CP, shard_forward
from .step_cache import JaxStepCache


def make_step(
    tcfg,
    param_specs,
    mesh,
    valid: int,
    batch: int,
    halves: int,
    per_token: bool,
    kernel: str,
    cache: CacheSpec | None = None,
    segment: bool | str = False,
):
    """The pure step: (params, x, t, guidance, context, cos, sin, cond, t_mask) → guided
    prediction, on global arrays: `shard_forward` maps the forward onto the mesh and XLA places
    the CFG combine. It closes over plain values only (no arrays), so a cached program keeps
    no weights alive. With a step cache (`cache`): cached_step.py's step, which also takes the
    step's plan row and the cache arrays and returns (prediction, arrays, decisions)."""

    def forward_float32(p, x, t, c, rope, attn, run_blocks, *segment_inputs):
        # float32 inside the mapped forward: every program keeps the last linear's float32
        # result. Cast outside, whether the bf16 rounding at the shard_map's edge happened was
        # XLA's choice per program (it allows excess precision): one device's kept float32
        # where every mesh rounded, 3.9e-3 of a step's prediction (tests/parallel/test_bf16_meshes.py)
        if segment == "s2v":  # S2V: the shard's pose and extra embeddings, the audio, its tokens' kinds and frames
            pose, extra, audio, audio_global, video, frames_of = segment_inputs
            inputs = s2v.MaskedInputs(pose, extra, audio, audio_global, video, frames_of)
            return ops.cast(s2v.forward_masked(p, x, t, c, inputs, rope, tcfg, ops, attn, run_blocks), "float32")
        if segment:  # Animate: the shard's pose, the image and face tokens, its tokens' frames
            pose, image, face, frames_of = segment_inputs
            inputs = animate.SegmentInputs(pose, image, face)
            out = animate.forward(p, x, t, c, inputs, rope, tcfg, ops, attn, run_blocks, face_frames=frames_of)
            return ops.cast(out, "float32")
        return ops.cast(dit.forward(p, x, t, c, rope, tcfg, ops, attn, run_blocks), "float32")

    forward = shard_forward(
        forward_float32,
        mesh,
        valid,
        per_token_timestep=per_token,
        shared_timestep=True,
        param_specs=param_specs,
        kernel=kernel,
        block_seam=BlockCache(cache) if cache is not None and cache.kind != "taylorseer" else None,
        extra_specs=S2V_SPECS if segment == "s2v" else SEGMENT_SPECS if segment else (),
    )

    # The forward's inputs and the CFG combine: pipeline/model_inputs.py, as every backend's. The
    # timestep is one row that every row uses, so the time embedding is a 1-row GEMM on every
    # mesh: per row, a CFG half alone (dp) ran a 1-row GEMM where one device runs 2 rows, and
    # XLA:CPU summed them in other orders (45 of 1000 timesteps came out otherwise).
    layout = model_inputs.StepRows(batch, halves, per_token, tuple(tcfg.patch_size))

    if cache is not None:
        return cached_step(cache, forward, layout)

    def noise_prediction_step(params, x, t, guidance, context, cos, sin, cond, t_mask, *segment_inputs):
        tokens, ts, context = model_inputs.forward_inputs(layout, x, t, context, cond, t_mask, ops)
        out = forward(params, tokens, ts, context, cos, sin, *segment_inputs)
        return model_inputs.guided_prediction(layout, out, guidance)

    noise_prediction_step.__name__ = STEP_NAME
    return noise_prediction_step


# Animate's per-row pose (token-sharded), image and face tokens, and each token's frame
SEGMENT_SPECS = (P("dp", CP, None), P("dp", None, None), P("dp", None, None, None), P(CP))


# S2V's per-row pose and extra embeddings (token-sharded), audio tokens and global vectors, and
# each token's kind (video or not) and latent frame
S2V_SPECS = (P("dp", CP, None), P("dp", CP, None), P("dp", None, None, None), P("dp", None, None), P(CP), P(CP))


_SEGMENT_PROGRAMS: dict = {}  # (config, guided, frame tokens) → the jitted maker, shared by segments


def _s2v_program(tcfg, guided: bool, motion: bool):
    """S2V's (cond, uncond) clip inputs as one jitted program per model and layout (with or
    without the motion frames), reused by every clip."""
    key = ("s2v", tcfg, guided, motion)
    if key not in _SEGMENT_PROGRAMS:

        def make(p, pose, reference, motion_latents, audio):
            a = s2v.SegmentArrays(pose, reference, motion_latents if motion else None, audio)
            return s2v.cond_and_uncond(p, a, tcfg, ops, guided)

        _SEGMENT_PROGRAMS[key] = jax.jit(make)
    return _SEGMENT_PROGRAMS[key]


def _segment_program(tcfg, guided: bool, frame_tokens: int):
    """Animate's (cond, uncond) segment inputs as one jitted program, made once per model and
    layout: every segment of a video (and every video of a job) reuses its compiled executable
    (a 512² StyleGAN encoder per segment would otherwise compile again each time)."""
    key = (tcfg, guided, frame_tokens)
    if key not in _SEGMENT_PROGRAMS:

        def make(p, pose, image, faces, blank, q):
            a = animate.SegmentArrays(pose, image, faces, blank, frame_tokens)
            return animate.cond_and_uncond(p, a, tcfg, ops, guided, q)

        _SEGMENT_PROGRAMS[key] = jax.jit(make)
    return _SEGMENT_PROGRAMS[key]


def host_copy(array) -> np.ndarray:
    """A host copy of a host array, or of a device array this process can see whole (a
    replicated global array is read from one local shard, which also works across hosts)."""
    if not isinstance(array, jax.Array):
        return np.asarray(array)
    if array.is_fully_addressable:
        return np.asarray(jax.device_get(array))
    if array.sharding.is_fully_replicated:
        return np.asarray(array.addressable_data(0))
    raise ValueError("a sharded global array cannot be copied to one host here; gather it first")


def put(array, sharding: NamedSharding):
    """A host (or device) array as a global array with `sharding`; built shard by shard from
    the host copy every process holds, so it works across hosts too."""
    host = host_copy(array)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


class JaxNoisePredictor(NoisePredictor):
    """`predict(expert, x, t, guidance)` → the guided prediction, float32, sharded like x."""

    def __init__(self, task, mesh, fsdp: bool = False, kernel: str = "auto"):
        self.task, self.mesh, self.kernel = task, mesh, kernel
        work = task.work
        self.valid, self.padded = work.shards.tokens, work.shards.padded
        self.batch = len(work.rows)
        self.halves = {name: task.halves(name) for name in task.experts}  # CFG halves per expert
        self.x_sharding = self.token_sharding(self.batch)
        tcfg = next(iter(task.experts.values()))[0]
        self.s2v = isinstance(task.segment_inputs, s2v.SegmentArrays)
        if self.s2v:  # the sequence goes on past the video's tokens: each token at its own position
            motion = task.segment_inputs.motion_latents is not None
            cos, sin = s2v_tokens.sequence_rope(tcfg.attention_head_dim, task.grid, motion, work.token_index())
        else:
            cos, sin = rope_tables(tcfg.attention_head_dim, task.grid, token_index=work.token_index())
        self.cos, self.sin = put(cos, NamedSharding(mesh, P(CP, None))), put(sin, NamedSharding(mesh, P(CP, None)))
        self.contexts = {
            h: put(self._forward_rows(task, h), NamedSharding(mesh, P("dp", None, None)))
            for h in set(self.halves.values())
        }
        # one row of condition tokens, which the step broadcasts over the prompts
        self.cond = None if task.cond_tokens is None else put(task.cond_tokens, NamedSharding(mesh, P(None, CP, None)))
        mask = model_inputs.timestep_mask(task)
        self.t_mask = None if mask is None else put(mask, NamedSharding(mesh, P(CP)))
        self.specs = {name: placement.param_specs(p) if fsdp else None for name, (_, p) in task.experts.items()}
        self.cache_spec = self.cache = None
        if task.cache_plan is not None:
            self.cache_spec, self.cache = self._step_cache(task, tcfg)
        self.segment = None if task.segment_inputs is None else self._segment_inputs(task, tcfg)
        self.programs: dict[str, object] = {}  # expert → jitted step (experts with equal shapes share one)
        self.compiled: dict[str, object] = {}  # expert → its compiled executable
        self.scanned = None  # scan_loop=true: the whole loop as one program (scan_loop.py)
        self._build_programs()

    # ------------------------------------------------------------ set-up
    def _s2v_inputs(self, task, tcfg, params) -> dict:
        """S2V: per CFG-halves count, the step's extra inputs — the rows' pose and extra
        embeddings over the whole padded sequence, the audio tokens, and each token's kind and
        latent frame — made once per clip with the expert's weights, placed for the step."""
        arrays, guided = task.segment_inputs, task.uses_guidance
        motion = arrays.motion_latents is not None
        program = _s2v_program(tcfg, guided, motion)
        motion_latents = arrays.motion_latents if motion else jnp.zeros((), jnp.float32)
        halves = program(params, arrays.pose_tokens, arrays.reference_tokens, motion_latents, arrays.audio)
        video = arrays.pose_tokens.shape[1]
        halves = tuple(
            None if h is None else h._replace(**dict(zip(("pose", "extra"), s2v.aligned(h, video, self.padded, ops))))
            for h in halves
        )
        index = np.arange(self.padded)
        frame_tokens = task.grid[1] * task.grid[2]
        kinds = (index < video, np.where(index < video, index // frame_tokens, 0).astype(np.int32))
        out = {}
        for count in set(self.halves.values()):
            layout = model_inputs.StepRows(self.batch, count, False, tuple(tcfg.patch_size))
            rows = model_inputs.segment_rows(halves, layout, None, ops)
            placed = [put(a, NamedSharding(self.mesh, spec)) for a, spec in zip(rows, S2V_SPECS)]
            out[count] = (*placed, *(put(a, NamedSharding(self.mesh, P(CP))) for a in kinds))
        return out

    def _segment_inputs(self, task, tcfg) -> dict:
        """Animate: per CFG-halves count, the step's extra inputs — the rows' pose (padded to the
        sharded length), image and face tokens in the forward's row layout, and each token's
        latent frame — made once per segment with the expert's weights, placed for the step."""
        (name,) = task.experts
        params = task.experts[name][1]
        if self.specs[name] is not None:  # FSDP: the encoders' weights whole for this once
            params = jax.device_put(params, NamedSharding(self.mesh, P()))
        if self.s2v:
            return self._s2v_inputs(task, tcfg, params)
        arrays, guided = task.segment_inputs, task.uses_guidance
        # one compiled program, not eager dispatch (6 of 12 s on the tiny model): the motion
        # basis's QR on the host first, as the eager path makes it
        basis = motion_basis(host_copy(params["motion_encoder"]["motion_synthesis_weight"]))

        program = _segment_program(tcfg, guided, arrays.frame_tokens)
        halves = program(params, arrays.pose_tokens, arrays.image_features, arrays.faces, arrays.blank_faces, basis)
        pad = self.padded - self.valid
        halves = tuple(
            None if h is None else h._replace(pose=jnp.pad(h.pose, ((0, 0), (0, pad), (0, 0)))) for h in halves
        )
        frame_tokens = task.grid[1] * task.grid[2]
        frames_of = np.minimum(np.arange(self.padded) // frame_tokens, task.grid[0] - 1).astype(np.int32)
        specs = SEGMENT_SPECS
        out = {}
        for count in set(self.halves.values()):
            layout = model_inputs.StepRows(self.batch, count, False, tuple(tcfg.patch_size))
            rows = model_inputs.segment_rows(halves, layout, None, ops)
            placed = [put(a, NamedSharding(self.mesh, spec)) for a, spec in zip(rows, specs)]
            out[count] = (*placed, put(frames_of, NamedSharding(self.mesh, specs[3])))
        return out

    def _forward_rows(self, task, halves: int) -> np.ndarray:
        """Context rows of a forward batch with `halves` CFG halves, in the one CFG layout:
        [prompts…, negative × B], or [prompts…] (the widest forward's first rows)."""
        rows = model_inputs.widest_context_rows(task)[: halves * len(task.work.rows)]
        return host_copy(task.context)[rows]

    def context_for(self, expert: str):
        """The context rows `expert`'s step reads."""
        return self.contexts[self.halves[expert]]

    def _step_cache(self, task, tcfg) -> tuple[CacheSpec, JaxStepCache]:
        """The step cache's static description (part of the programs' keys) and its host side.
        Its arrays hold every forward row, sharded as the tokens are: the hidden states'
        (MagCache, First-Block Cache; the weights' dtype) or the output's (TaylorSeer, fp32)."""
        # one set of arrays serves both experts, so their CFG halves agree (config.resolve refuses
        # a JAX step cache with guidance 1.0 on one expert only)
        (halves,) = set(self.halves.values())
        settings, rows = task.cache, halves * self.batch
        spec = CacheSpec(
            settings.kind, settings.threshold, settings.order, settings.calibrate, self.batch, halves, self.valid
        )
        for other, _ in task.experts.values():
            if (other.dim, other.out_channels, other.patch_size) != (tcfg.dim, tcfg.out_channels, tcfg.patch_size):
                raise ValueError(
                    "a step cache keeps one set of arrays for both experts, so they must agree in "
                    "dim, out_channels and patch_size"
                )
        if settings.kind == "taylorseer":
            shape, dtype = (rows, self.padded, tcfg.out_channels * math.prod(tcfg.patch_size)), jnp.float32
        else:
            weight = next(iter(task.experts.values()))[1]["patch_embedding"]["weight"]
            shape, dtype = (rows, self.padded, tcfg.dim), weight.dtype
        sharding = self.token_sharding(rows)
        zeros = jax.jit(lambda: jnp.zeros(shape, dtype), out_shardings=sharding)
        # The block stack runs on every device when any branch computes (cached_blocks.py), so
        # with two branches a split decision discards work, as on one torch device.
        cache = JaxStepCache(
            settings,
            task.cache_plan,
            branch_names(task.uses_guidance),
            tcfg.num_layers,
            {name: zeros() for name in spec.state_names()},
            shared_rows=halves == 2,
        )
        return spec, cache

    def program_key(self, expert: str) -> tuple:
        """Everything the step's trace depends on besides the arguments' shapes."""
        tcfg, params = self.task.experts[expert]
        # the params' dtypes and shapes too: two experts may be stored differently (an int8 file
        # for one, float8 for the other: weights_high= / weights_low=), each its own program
        stored = repr(jax.tree.map(lambda a: (a.dtype.name, a.shape), params))
        return (
            tcfg,
            repr(self.specs[expert]),
            mesh_key(self.mesh),
            self.valid,
            self.padded,
            self.batch,
            self.halves[expert],
            self.task.per_token_timestep,
            self.kernel,
            self.cache_spec,
            stored,
            self._segment_kind(),
        )

    def _segment_kind(self) -> bool | str:
        """The step's extra inputs: none (False), Animate's (True) or S2V's ("s2v")."""
        return "s2v" if self.s2v else self.segment is not None

    def step_function(self, expert: str):
        tcfg = self.task.experts[expert][0]
        return make_step(
            tcfg,
            self.specs[expert],
            self.mesh,
            self.valid,
            self.batch,
            self.halves[expert],
            self.task.per_token_timestep,
            self.kernel,
            self.cache_spec,
            self._segment_kind(),
        )

    def out_shardings(self):
        """The step's: the prediction like x; with a cache, its arrays like the forward rows and
        its decisions replicated."""
        if self.cache is None:
            return self.x_sharding
        return (self.x_sharding, {k: v.sharding for k, v in self.cache.zeros.items()}, NamedSharding(self.mesh, P()))

    def _build_programs(self) -> None:
        for name in self.task.experts:
            self.programs[name] = cached_program(
                ("step",) + self.program_key(name),
                lambda: jax.jit(self.step_function(name), out_shardings=self.out_shardings()),
            )

    def _inputs(self, expert: str, x, t, guidance):
        _, params = self.task.experts[expert]
        inputs = (
            params,
            x,
            np.float32(t),
            np.float32(guidance),
            self.context_for(expert),
            self.cos,
            self.sin,
            self.cond,
            self.t_mask,
        )
        if self.segment is not None:
            inputs = inputs + self.segment[self.halves[expert]]
        return inputs if self.cache is None else inputs + (self.cache.row(), self.cache.arrays)

    def token_sharding(self, rows: int) -> NamedSharding:
        """(rows, tokens, F): rows over dp when they split evenly — else replicated over dp (one
        prompt under CFG parallel: both dp groups hold x and run one half each) — tokens over cp."""
        return NamedSharding(self.mesh, P("dp" if rows % self.mesh.shape["dp"] == 0 else None, CP, None))

    # ------------------------------------------------------------ use
    def shard(self, x):
        return jax.device_put(x, self.x_sharding if x.shape[0] == self.batch else self.token_sharding(x.shape[0]))

    def compile(self, x, plan=None, sampler=None, held=None) -> dict:
        """Compile ahead of time with the real shapes: each distinct step program once (both
        experts share one when their shapes agree), or with `plan` and `sampler` the whole
        scanned loop. Returns {program: seconds}. (The host loop's own elementwise ops are
        warmed by pipeline.denoise.rehearse_loop, which runs that loop.)"""
        seconds = {}
        if plan is not None:
            t0 = time.perf_counter()
            self.scanned = ScannedLoop(self, plan, sampler, held)
            self.scanned.compile(x, sampler.initial_state())
            seconds["denoise_scan"] = time.perf_counter() - t0
            return seconds
        by_program: dict = {}
        for name in self.task.experts:
            by_program.setdefault(id(self.programs[name]), []).append(name)
        for names in by_program.values():
            t0 = time.perf_counter()
            compiled = self.programs[names[0]].lower(*self._inputs(names[0], x, 0.0, 1.0)).compile()
            for name in names:
                self.compiled[name] = compiled
            seconds[f"step[{'+'.join(names)}]"] = time.perf_counter() - t0
        return seconds

    def before_step(self, step) -> None:
        """Called by the denoise loop before each step: the step cache's step."""
        if self.cache is not None:
            self.cache.begin(step.index)

    def __call__(self, expert: str, x, t: float, guidance: float):
        x = self.shard(x)
        program = self.compiled.get(expert) or self.programs[expert]
        if self.cache is None:
            return program(*self._inputs(expert, x, t, guidance))
        prediction, arrays, decisions = program(*self._inputs(expert, x, t, guidance))
        self.cache.after_step(arrays, decisions)  # read on the host only when the loop ends
        return prediction

    def cache_report(self) -> dict | None:
        """The sidecar's "cache" record (caching/step_cache.cache_record, as torch writes it)."""
        return None if self.cache is None else self.cache.report()

    def run_steps(self, x, sampler_state: dict, plan, sampler, held, start: int, stop: int):
        """Steps [start, stop) of `plan` in one compiled program (scan_loop=true), from the
        sampler state after step start − 1: (latents, sampler state) after step stop − 1."""
        if self.scanned is None:
            self.scanned = ScannedLoop(self, plan, sampler, held)
        return self.scanned(x, sampler_state, start, stop)
