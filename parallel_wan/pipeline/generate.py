"""One generation end to end (DESIGN.md steps 2–7), on any backend."""

from __future__ import annotations

import dataclasses
import logging
import math
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..config import RunSpec
from ..models import transformer as dit
from ..report.timing import PhaseTimer
from .checkpoint import architecture_record, load
from .conditioning import i2v_condition, load_image, ti2v_first_frame
from .denoise import DenoiseTask, compile_loop, denoise, draw_noise
from .local_work import gather_latent_tokens, local_work
from .loop_state import LoopState
from .steps import pick_schedule, plan_record, step_cache_plan, step_plan, unguided_experts

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
    expert guides. No expert guiding (every guidance 1.0): no negative prompt is encoded."""
    from ..text.umt5 import DEFAULT_NEGATIVE_PROMPT

    negative = DEFAULT_NEGATIVE_PROMPT if spec.video.negative_prompt is None else spec.video.negative_prompt
    return [*spec.video.prompts, negative] if spec.uses_guidance else list(spec.video.prompts)


def encode_text(spec: RunSpec, loaded, backend):
    """Prompts and the negative prompt through UMT5 in one batched call on the main rank,
    then broadcast; the encoder is released. A job of many entries encodes every text once
    up front (jobs/texts.py) and hands the rows over in `loaded.texts`."""
    context = None
    if backend.is_main:
        texts = getattr(loaded, "texts", None)  # a caller's own components may not have the field
        if texts is not None:
            context = texts[tuple(texts_of(spec))].to(backend.text_device)
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
) -> Generation:
    """One generation; with `start` (host or device arrays, `load_loop_state`) the loop resumes
    from that state, and with `stop_after` it stops once that many steps are done: a stop
    before the last step returns the loop's state (in `Generation.state`) and decodes nothing.
    `should_stop()` may end the loop after any step the same way (preemption: jobs/).

    `components`: what `load_components` loaded, for a job that loads once and generates many
    times (jobs/runner.py); the load phase is then skipped."""
    ops = backend.ops
    timer = PhaseTimer(backend.synchronize)
    progress = progress or (lambda it: it)
    with tempfile.TemporaryDirectory(prefix="parallel_wan_tiny_") as tiny_dir, backend.inference_mode():
        if components is None:  # a caller that did not load (tests, benchmarks): the run's one load
            with timer.phase("load"):
                loaded, ckpt = load(spec, backend, ckpt, tiny_dir)
        else:
            loaded = components
            ckpt = loaded.ckpt

        with timer.phase("text"):
            context = encode_text(spec, loaded, backend)

        vcfg = loaded.vae_config
        latent_frames = (spec.video.num_frames - 1) // vcfg.scale_factor_temporal + 1
        lh, lw = spec.video.height // vcfg.scale_factor_spatial, spec.video.width // vcfg.scale_factor_spatial
        tcfg = next(iter(loaded.experts.values()))[0]
        latent_shape = (1, tcfg.out_channels, latent_frames, lh, lw)
        grid = dit.patch_grid(tcfg, latent_shape)
        work = local_work(spec, math.prod(grid), backend)

        cond_tokens = fixed_tokens = fixed_mask = image_record = None
        if spec.video.image is not None:
            with timer.phase("vae_encode"):
                image, image_record = load_image(spec.video.image, spec.video.height, spec.video.width)
                if spec.model.task == "i2v":
                    cond = i2v_condition(
                        image, spec.video.num_frames, latent_frames, vcfg, loaded.vae_params, ops, backend
                    )
                    cond_tokens = work.local(dit.patchify(cond, tcfg.patch_size, ops), backend)
                else:
                    fixed_tokens, fixed_mask = ti2v_first_frame(
                        image, latent_frames, grid, vcfg, tcfg, loaded.vae_params, ops, backend
                    )
                    fixed_tokens, fixed_mask = work.local(fixed_tokens, backend), work.local_host(fixed_mask)

        schedule_kind, schedule = pick_schedule(spec, ckpt)
        task = DenoiseTask(
            loaded.experts,
            context,
            len(spec.video.prompts),
            work,
            grid,
            spec.uses_guidance,
            per_token_timestep=spec.model.task == "ti2v",
            cond_tokens=cond_tokens,
            fixed_mask=fixed_mask,
            cache=spec.cache if spec.cache.on else None,
            cache_plan=step_cache_plan(spec, ckpt, step_plan(spec, schedule)),
            unguided=unguided_experts(spec),
        )
        predict = backend.noise_predictor(task)
        decoder = backend.video_decoder(loaded.vae_params, vcfg)
        x = predict.shard(work.local(draw_noise(spec, work.rows, latent_shape, backend, tcfg.patch_size), backend))
        held = None
        if fixed_mask is not None:
            held = (predict.shard(fixed_tokens), backend.to_device(fixed_mask.astype(np.float32)))
        if start is not None:
            start = _place_state(start, predict, backend)

        compiled = {}
        if backend.compiles_ahead:
            # Both experts' steps (or the whole scanned loop) and the VAE decode, with the real
            # shapes, before the timed phases: compile time is reported apart from run time.
            with timer.phase("compile"):
                compiled.update(compile_loop(spec, schedule, x, predict, ops, held))
                compiled.update(decoder.compile(latent_shape))

        with timer.phase("denoise"):
            state = denoise(
                spec,
                schedule,
                x,
                predict,
                progress,
                ops,
                held,
                start=start,
                stop_after=stop_after,
                should_stop=should_stop,
            )
            if state.step < schedule.steps:  # stopped early: the caller keeps the state
                return Generation([], None, timer.as_dict(), {"stopped_after": state.step}, state)
            tokens = gather_latent_tokens(state.latents, work, spec, backend)
            cache_record = predict.cache_report() if spec.cache.on else None
        latents = dit.unpatchify(tokens, grid, tcfg.patch_size, ops)

        # Every rank decodes a band of rows (the torch decoder) or its devices' share (JAX);
        # the videos come back on the main rank.
        with timer.phase("vae_decode"):
            videos = decoder(latents)

    steps_per_expert = {}
    plan = step_plan(spec, schedule)
    for step in plan:
        steps_per_expert[step.expert] = steps_per_expert.get(step.expert, 0) + 1
    info = {
        "checkpoint": {
            "layout": ckpt.layout,
            "path": spec.weights.checkpoint_dir or "built-in tiny model",
            "architecture": architecture_record(spec, ckpt),
        },  # the checkpoint's configs, which won
        "schedule": schedule_kind,
        "timesteps": [float(t) for t in schedule.timesteps],
        "sigmas": [float(s) for s in schedule.sigmas],  # steps + 1: the last is 0
        "steps_per_expert": steps_per_expert,
        "steps_plan": plan_record(plan, schedule),
        "latent_shape": list(latent_shape),
        "device": str(backend.device),
        "mesh": {
            **spec.mesh.to_dict(),
            "tokens": work.shards.tokens,
            "tokens_per_rank": work.shards.local,
            "padding": work.shards.padding,
        },
    }
    info["quantization"] = {
        "quantize": spec.quantization.quantize,
        "quant_compute": spec.quantization.compute,
        "chosen": backend.quant_compute,
    }  # the path quantized layers take on this device
    # attention_impl as set (auto …) and the kernel it resolved to on this device
    info["attention"] = {
        "attention_impl": spec.execution.attention_impl,
        "kernel": backend.attention_kernel(spec.execution.dtype, tcfg.attention_head_dim),
    }
    if compiled:
        info["compile"] = compiled
    if ckpt.expert_files:  # experts from one file each (weights_high= …): where, format, stored dtype
        info["expert_files"] = {name: file.record() for name, file in ckpt.expert_files.items()}
    if loaded.loras and any(loaded.loras.values()):
        info["lora"] = {name: lora.record() for name, lora in loaded.loras.items() if lora is not None}
    if cache_record is not None:
        info["cache"] = cache_record
        _log_cache(cache_record, spec.sampling.steps)
    if image_record is not None:
        info["image"] = image_record
    info["videos"] = [{"prompt": p, "seed": spec.video.seed_of(i)} for i, p in enumerate(spec.video.prompts)]
    return Generation(videos=videos, latents=backend.to_host(latents), timings=timer.as_dict(), info=info)


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
