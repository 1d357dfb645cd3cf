"""One generation end to end (the data flow in docs/architecture.md), on any backend."""

from __future__ import annotations

import dataclasses
import logging
import math
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..config import RunSpec
from ..models import latent, transformer as dit
from ..models.variants import IMAGE, JOINED_CHANNELS
from ..report.timing import PhaseTimer
from .checkpoint import load
from .conditioning import i2v_condition, load_image, ti2v_first_frame
from .denoise import DenoiseTask, compile_loop, denoise, draw_noise
from .local_work import gather_latent_tokens, local_work
from .loop_state import LoopState
from .preview import preview_watch
from .segmented import SegmentStopped
from .sidecar import Ran, sidecar_info
from .source_video import extended, last_frame, noised, source_tokens
from .steps import first_step, pick_schedule, step_cache_plan, step_plan, unguided_experts

log = logging.getLogger("parallel_wan")


@dataclass
class Generation:
    videos: list  # per prompt: (T, H, W, 3) uint8 frames — on the main rank; empty elsewhere
    latents: np.ndarray  # (prompts, C, T, h, w) float32, the final denoised latents
    timings: dict
    info: dict = field(default_factory=dict)
    state: LoopState | None = None  # generate(stop_after=k) with k < steps: the loop's state after step k

    @property
    def frames(self) -> np.ndarray | None:
        """The first (for one prompt: the only) video's frames; None off the main rank."""
        return self.videos[0] if self.videos else None


def texts_of(spec: RunSpec) -> list[str]:
    """What the forward reads, in order: every prompt, then the negative prompt when some
    expert guides (a batch of requests: each prompt's own, in the prompts' order). No expert
    guiding (every guidance 1.0): no negative prompt is encoded."""
    from ..text.umt5 import DEFAULT_NEGATIVE_PROMPT, S2V_NEGATIVE_PROMPT

    video = spec.video
    if not spec.uses_guidance:
        return list(video.prompts)
    negatives = (video.negative_prompt,) if video.negative_prompts is None else video.negative_prompts
    default = S2V_NEGATIVE_PROMPT if video.s2v is not None else DEFAULT_NEGATIVE_PROMPT
    return [*video.prompts, *(default if n is None else n for n in negatives)]


def encode_text(spec: RunSpec, loaded, backend):
    """Prompts and the negative prompt through UMT5 in one batched call on the main rank,
    then broadcast; the encoder is released. A caller with a texts source in `loaded.texts`
    (text_sources.py: a job's texts encoded up front, a server's encoded on demand) gives the
    rows instead."""
    context = None
    if backend.encodes_text:
        if loaded.texts is not None:
            context = loaded.texts.rows(tuple(texts_of(spec))).to(backend.text_device)
        else:
            context = loaded.text_encoder.encode(texts_of(spec))
            loaded.text_encoder.release()
    return backend.ops.cast(backend.broadcast_from_main(context), spec.execution.dtype)


def generate(
    spec: RunSpec,
    backend,
    ckpt=None,
    progress=None,
    start: LoopState | None = None,
    stop_after: int | None = None,
    components=None,
    should_stop=None,
    preview=None,
) -> Generation:
    """One generation; with `start` (host or device arrays, `load_loop_state`) the loop resumes
    from that state, and with `stop_after` it stops once that many steps are done: a stop
    before the last step returns the loop's state (in `Generation.state`) and decodes nothing.
    `should_stop()` may end the loop after any step the same way (preemption: jobs/).

    `components`: what `load_components` loaded, for a job that loads once and generates many
    times (jobs/runner.py); the load phase is then skipped. `preview`: a server's progress
    preview (pipeline/preview.py)."""
    timer = PhaseTimer(backend.synchronize)
    with tempfile.TemporaryDirectory(prefix="parallel_wan_tiny_") as tiny_dir, backend.inference_mode():
        segmented = _segmented(spec)  # Animate and S2V: segment by segment, clip by clip
        if segmented is not None:
            # a server's progress preview shows the running segment's video; a loop state to
            # resume from is not made (pipeline/segmented.py): `should_stop` ends the video,
            # nothing decoded
            if start is not None or stop_after is not None:
                raise NotImplementedError("Animate and S2V runs have no resume yet (issue 42)")
            loaded, ckpt = _loaded(spec, backend, ckpt, components, timer, tiny_dir)
            with timer.phase("text"):
                context = encode_text(spec, loaded, backend)
            try:
                videos, latents, info = segmented(
                    spec, backend, loaded, ckpt, context, progress or (lambda it: it), timer, should_stop, preview
                )
            except SegmentStopped as stopped:
                info = {"stopped_after": stopped.state.step, "segment": stopped.segment}
                return Generation([], None, timer.as_dict(), info, stopped.state)
            return Generation(videos=videos, latents=latents, timings=timer.as_dict(), info=info)
        run = _prepare(spec, backend, ckpt, components, start, timer, tiny_dir)
        with timer.phase("denoise"):
            watch = preview_watch(spec, run.schedule, run.shapes, backend, preview)
            state = _denoise(spec, run, progress or (lambda it: it), backend.ops, stop_after, should_stop, watch)
            if state.step < run.schedule.steps:  # stopped early: the caller keeps the state
                return Generation([], None, timer.as_dict(), {"stopped_after": state.step}, state)
            tokens = gather_latent_tokens(state.latents, run.shapes.work, spec, backend)
            cache_record = run.predict.cache_report() if spec.cache.on else None
            sparse_record = run.predict.sparse_report() if spec.sparse_attention.on else None
        latents = dit.unpatchify(tokens, run.shapes.grid, run.shapes.transformer.patch_size, backend.ops)

        # Every rank decodes a band of rows (the torch decoder) or its devices' share (JAX);
        # the videos come back on the main rank.
        with timer.phase("vae_decode"):
            videos = run.decoder(latents)
        if spec.video.extend is not None and videos:  # the main rank: the continued video, then the new frames
            videos = [extended(spec.video.extend, v) for v in videos]

    info = sidecar_info(spec, backend, run.ran(cache_record, sparse_record))
    if cache_record is not None:
        _log_cache(cache_record, spec.sampling.steps)
    return Generation(videos=videos, latents=backend.to_host(latents), timings=timer.as_dict(), info=info)


def _segmented(spec: RunSpec):
    """The generation of a variant made in segments with a loop of its own (pipeline/animate.py,
    pipeline/s2v.py), or None for one denoising loop."""
    if spec.video.animate is not None:
        from .animate import generate_animate

        return generate_animate
    if spec.video.s2v is not None:
        from .s2v import generate_s2v

        return generate_s2v
    return None


@dataclass(frozen=True)
class _Prepared:
    """Everything the loop starts from: what was loaded, the shapes, the first frame's inputs, the
    schedule, the predictor and decoder, the first latents (or the resumed state) and what was
    compiled ahead."""

    loaded: object
    ckpt: object
    shapes: _Shapes
    image: _ImageInputs
    schedule_kind: str
    schedule: object
    predict: object
    decoder: object
    x: object
    held: tuple | None
    start: LoopState | None
    compiled: dict

    def ran(self, cache_record: dict | None, sparse_record: dict | None = None) -> Ran:
        """What ran, for the sidecar (sidecar.py)."""
        return Ran(
            ckpt=self.ckpt,
            schedule_kind=self.schedule_kind,
            schedule=self.schedule,
            latent_shape=self.shapes.latent_shape,
            shards=self.shapes.work.shards,
            head_dim=self.shapes.transformer.attention_head_dim,
            compiled=self.compiled,
            loras=self.loaded.loras,
            cache=cache_record,
            image=self.image.record,
            sparse=sparse_record,
        )


def _prepare(spec: RunSpec, backend, ckpt, components, start, timer: PhaseTimer, tiny_dir: str) -> _Prepared:
    """Load (unless loaded), encode the texts and the first frame, build the predictor and the
    decoder, draw the noise or place the resumed state, and compile ahead — each phase timed."""
    loaded, ckpt = _loaded(spec, backend, ckpt, components, timer, tiny_dir)
    with timer.phase("text"):
        context = encode_text(spec, loaded, backend)
    shapes = _shapes(spec, loaded, backend)
    image = _image_inputs(spec, loaded, shapes, backend, timer)
    schedule_kind, schedule = pick_schedule(spec, ckpt)
    predict = backend.noise_predictor(_denoise_task(spec, loaded, context, shapes, image, ckpt, schedule))
    decoder = backend.video_decoder(loaded.vae_params, shapes.vae)
    x, held = _first_latents(spec, shapes, image, predict, backend, loaded, schedule, timer)
    if start is not None:
        start = _place_state(start, predict, backend)
    compiled = _compile_ahead(spec, schedule, x, predict, held, decoder, shapes, backend, timer)
    return _Prepared(loaded, ckpt, shapes, image, schedule_kind, schedule, predict, decoder, x, held, start, compiled)


def _denoise(spec: RunSpec, run: _Prepared, progress, ops, stop_after: int | None, should_stop, watch) -> LoopState:
    return denoise(
        spec,
        run.schedule,
        run.x,
        run.predict,
        progress,
        ops,
        run.held,
        start=run.start,
        stop_after=stop_after,
        should_stop=should_stop,
        watch=watch,
    )


@dataclass(frozen=True)
class _Shapes:
    """The run's shapes: the configs that ran, the latent, its patch grid and this rank's work."""

    transformer: object  # the first expert's transformer config (the experts' shapes agree)
    vae: object
    latent_shape: tuple
    grid: tuple
    work: object  # RankWork (parallel/work.py): this rank's rows and token shard


@dataclass(frozen=True)
class _ImageInputs:
    """What the first frame gives the loop: the I2V condition's tokens (joined channels), or the
    TI2V held first frame's tokens and mask; `record` for the sidecar. All None without an image."""

    cond_tokens: object = None
    fixed_tokens: object = None
    fixed_mask: np.ndarray | None = None
    record: dict | None = None


def _loaded(spec: RunSpec, backend, ckpt, components, timer: PhaseTimer, tiny_dir: str):
    """(loaded components, checkpoint): a caller that did not load (tests, benchmarks) gets the
    run's one load, timed as "load"."""
    if components is not None:
        return components, components.ckpt
    with timer.phase("load"):
        return load(spec, backend, ckpt, tiny_dir)


def _shapes(spec: RunSpec, loaded, backend) -> _Shapes:
    vcfg, video = loaded.vae_config, spec.video
    tcfg = next(iter(loaded.experts.values()))[0]
    latent_shape = latent.latent_shape(video.num_frames, video.height, video.width, tcfg.out_channels, vcfg)
    grid = dit.patch_grid(tcfg, latent_shape)
    return _Shapes(tcfg, vcfg, latent_shape, grid, local_work(spec, math.prod(grid), backend))


def _image_inputs(spec: RunSpec, loaded, shapes: _Shapes, backend, timer: PhaseTimer) -> _ImageInputs:
    """The first frame through the VAE encoder (timed as "vae_encode"), entering as the variant
    says: joined to the noise's channels (I2V) or held as the first latent frame (TI2V)."""
    if spec.video.image is None and spec.video.extend is None:
        return _ImageInputs()
    ops, tcfg, vcfg, work = backend.ops, shapes.transformer, shapes.vae, shapes.work
    latent_frames = shapes.latent_shape[2]
    with timer.phase("vae_encode"):
        if spec.video.image is not None:
            image, record = load_image(spec.video.image, spec.video.height, spec.video.width)
        else:  # an extension: the last frame of the video it continues
            image, record = last_frame(spec.video.extend, spec.video.height, spec.video.width)
        if spec.model.variant.input(IMAGE).enters == JOINED_CHANNELS:
            last = None
            if spec.video.last_image is not None:  # first-last-frame video
                last, last_record = load_image(spec.video.last_image, spec.video.height, spec.video.width)
                record = {**record, "last_image": last_record}
            cond = i2v_condition(
                image, spec.video.num_frames, latent_frames, vcfg, loaded.vae_params, ops, backend, last
            )
            return _ImageInputs(
                cond_tokens=work.local(dit.patchify(cond, tcfg.patch_size, ops), backend), record=record
            )
        # HELD_FRAMES
        fixed_tokens, fixed_mask = ti2v_first_frame(
            image, latent_frames, shapes.grid, vcfg, tcfg, loaded.vae_params, ops, backend
        )
        return _ImageInputs(
            fixed_tokens=work.local(fixed_tokens, backend), fixed_mask=work.local_host(fixed_mask), record=record
        )


def _denoise_task(spec: RunSpec, loaded, context, shapes: _Shapes, image: _ImageInputs, ckpt, schedule):
    return DenoiseTask(
        loaded.experts,
        context,
        len(spec.video.prompts),
        shapes.work,
        shapes.grid,
        spec.uses_guidance,
        per_token_timestep=spec.model.variant.per_token_timestep,
        cond_tokens=image.cond_tokens,
        fixed_mask=image.fixed_mask,
        cache=spec.cache if spec.cache.on else None,
        cache_plan=step_cache_plan(spec, ckpt, step_plan(spec, schedule)),
        unguided=unguided_experts(spec),
        negatives=1 if spec.video.negative_prompts is None else len(spec.video.negative_prompts),
        sparse=spec.sparse_attention if spec.sparse_attention.on else None,
        sparse_from_step=first_step(spec, schedule) + spec.sparse_attention.dense_steps,
    )


def _first_latents(spec: RunSpec, shapes: _Shapes, image: _ImageInputs, predict, backend, loaded, schedule, timer):
    """(the seeded noise — with a source video, the source's latents noised to the first step's σ —
    as the predictor keeps tokens, the held first frame or None)."""
    work, tcfg = shapes.work, shapes.transformer
    x = draw_noise(spec, work.rows, shapes.latent_shape, backend, tcfg.patch_size)
    if spec.video.video is not None:
        with timer.phase("vae_encode"):
            source, _ = source_tokens(spec, loaded.vae_params, shapes.vae, tcfg.patch_size, backend)
        x = noised(source, x, float(schedule.sigmas[first_step(spec, schedule)]), len(work.rows), backend.ops)
    x = predict.shard(work.local(x, backend))
    held = None
    if image.fixed_mask is not None:
        held = (predict.shard(image.fixed_tokens), backend.to_device(image.fixed_mask.astype(np.float32)))
    return x, held


def _compile_ahead(spec: RunSpec, schedule, x, predict, held, decoder, shapes: _Shapes, backend, timer) -> dict:
    """Both experts' steps (or the whole scanned loop) and the VAE decode, with the real shapes,
    before the timed phases: compile time is reported apart from run time. {} on a backend that
    compiles on first use."""
    compiled = {}
    if backend.compiles_ahead:
        with timer.phase("compile"):
            compiled.update(compile_loop(spec, schedule, x, predict, backend.ops, held))
            compiled.update(decoder.compile(shapes.latent_shape))
    return compiled


def _place_state(state: LoopState, predict, backend) -> LoopState:
    """A loaded state's arrays on the device, laid out as the predictor keeps tokens; a step
    cache's logs (`log_*`) stay host arrays."""

    def place(a):
        return predict.shard(backend.to_device(a))

    cache = {k: v if k.startswith("log_") or v is None else place(v) for k, v in state.cache.items()}
    return dataclasses.replace(
        state,
        latents=place(state.latents),
        sampler={k: None if v is None else place(v) for k, v in state.sampler.items()},
        cache=cache,
    )


def _log_cache(record: dict, steps: int) -> None:
    skipped = record["skipped"]
    log.info(
        "cache=%s: skipped %s of %d steps; %d of %d block forwards",
        record["kind"],
        ", ".join(f"{name} {len(s)}" for name, s in skipped.items()),
        steps,
        record["block_forwards"],
        record["block_forwards_dense"],
    )
