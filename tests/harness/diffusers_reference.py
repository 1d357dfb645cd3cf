"""The tiny model written as a checkpoint, and diffusers' pipelines run on the same model: the
reference the CLI's videos are compared with."""

from harness.cli import HEIGHT, NEGATIVE, NUM_FRAMES, PROMPT, SEED, STEPS, WIDTH
from harness.frames import to_uint8


def tiny_checkpoint(kind, tmp_path_factory):
    """The tiny model of this kind and the diffusers-layout checkpoint folder written from it."""
    from parallel_wan.builtin.tiny import build_tiny, write_checkpoint

    model = build_tiny(kind, seed=0)
    return model, str(write_checkpoint(model, tmp_path_factory.mktemp(kind) / "diffusers", "diffusers"))


def text_and_vae(model, scheduler=None) -> dict:
    """The tiny model's tokenizer, text encoder, VAE and scheduler as a diffusers pipeline takes them."""
    from diffusers import UniPCMultistepScheduler

    return dict(
        tokenizer=model.tokenizer,
        text_encoder=model.text_encoder,
        vae=model.vae,
        scheduler=scheduler or UniPCMultistepScheduler.from_config(model.scheduler_config),
    )


def pipeline_call(steps: int) -> dict:
    """The arguments every reference pipeline call shares: the CLI harness's prompt, size, seed."""
    import torch

    return dict(
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        max_sequence_length=512,
        output_type="np",
        generator=torch.Generator("cpu").manual_seed(SEED),
    )


def reference_frames(
    model,
    image=None,
    steps=STEPS,
    scheduler=None,
    cfg_on=None,
    boundary_ratio=None,
    latents=None,
    last_image=None,
    **guidance,
):
    """diffusers' frames (uint8) for the tiny model; I2V pipeline when an image is given. The
    pipeline uses the model's own transformers, so caches enabled on them apply. `scheduler`:
    another than the checkpoint's UniPC; `cfg_on`: whether every step runs CFG (None: diffusers'
    rule, guidance_scale > 1 — it decides once per run, not per expert); `boundary_ratio`: another
    than the model's; `last_image`: I2V's last frame too (first-last-frame video)."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanImageToVideoPipeline, WanPipeline
    from PIL import Image

    components = dict(
        tokenizer=model.tokenizer,
        text_encoder=model.text_encoder,
        vae=model.vae,
        scheduler=scheduler or UniPCMultistepScheduler.from_config(model.scheduler_config),
        transformer=model.transformer,
        transformer_2=model.transformer_2,
        boundary_ratio=model.boundary_ratio if boundary_ratio is None else boundary_ratio,
        expand_timesteps=model.kind == "ti2v",
    )
    pipeline = WanPipeline if image is None else WanImageToVideoPipeline
    if cfg_on is not None:
        pipeline = type(pipeline.__name__, (pipeline,), {"do_classifier_free_guidance": property(lambda _: cfg_on)})
    call = dict(**pipeline_call(steps), num_frames=NUM_FRAMES, latents=latents, **guidance)
    if image is None:
        pipe = pipeline(**components)
    else:
        # Wan 2.2 has no CLIP image branch
        pipe = pipeline(**components, image_encoder=None, image_processor=None)
        with Image.open(image) as im:
            call["image"] = im.convert("RGB")
        if last_image is not None:  # first-last-frame video
            with Image.open(last_image) as im:
                call["last_image"] = im.convert("RGB")
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        return to_uint8(pipe(**call).frames[0])


def v2v_frames(model, frames, strength, guidance, steps=STEPS, transformer=None, lora=None):
    """diffusers' WanVideoToVideoPipeline's uint8 frames from the source `frames` (uint8) on the
    tiny model's low-noise expert (its one transformer; `transformer`: another, e.g. one with a
    cache hook on it). `lora`: (file, scale) loaded with the pipeline's `load_lora_weights`
    for this call only."""
    import copy

    import torch
    from diffusers import WanVideoToVideoPipeline
    from PIL import Image

    transformer = transformer or model.transformer_2
    if lora is not None:
        # on a copy: the model is a session fixture, and deleting the adapter afterwards would
        # leave PEFT's wrappers in it (its state dict then names `…to_q.base_layer.weight`, and
        # a later test that writes the expert's weights writes those names)
        transformer = copy.deepcopy(transformer)
    pipe = WanVideoToVideoPipeline(**text_and_vae(model), transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    if lora is not None:
        pipe.load_lora_weights(lora[0], adapter_name="v2v")
        pipe.transformer.set_adapters(["v2v"], [lora[1]])
    with torch.no_grad():
        video = [Image.fromarray(f) for f in frames]
        out = pipe(video=video, strength=strength, guidance_scale=guidance, **pipeline_call(steps)).frames[0]
    return to_uint8(out)


def image_v2v_frames(model, image, frames, strength, steps=STEPS, **guidance):
    """An image-conditioned video-to-video run as diffusers' pieces make it — no diffusers
    pipeline does both: WanVideoToVideoPipeline's own `prepare_latents` (the source resized,
    VAE-encoded, normalised and noised to the first step run, from the seeded generator), then
    WanImageToVideoPipeline from those latents (`latents=`, which it takes as they are) with the
    image as its condition, its loop over the last int(steps·strength) timesteps only, as the
    video-to-video pipeline loops (the scheduler keeps the whole schedule and finds its place
    from the first timestep it is given)."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanVideoToVideoPipeline
    from PIL import Image

    v2v = WanVideoToVideoPipeline(**text_and_vae(model), transformer=model.transformer_2 or model.transformer)
    # diffusers 0.42's video-to-video pipeline counts the spatial stride as 2^(temporal downsamples),
    # 8, also for Wan 2.2's VAE (16, the I2V pipeline reads it from the VAE's config): the noise
    # would not fit TI2V's latents. Its config's value, as the I2V pipeline takes it.
    v2v.vae_scale_factor_spatial = model.vae.config.scale_factor_spatial
    v2v.scheduler.set_timesteps(steps)
    timesteps, _ = v2v.get_timesteps(steps, v2v.scheduler.timesteps, strength, "cpu")
    video = v2v.video_processor.preprocess_video([Image.fromarray(f) for f in frames], height=HEIGHT, width=WIDTH)
    with torch.no_grad():
        latents = v2v.prepare_latents(
            video.to(torch.float32),
            1,
            model.vae.config.z_dim,
            HEIGHT,
            WIDTH,
            torch.float32,
            "cpu",
            torch.Generator("cpu").manual_seed(SEED),
            None,
            timesteps[:1],
        )
    scheduler = _LastSteps(UniPCMultistepScheduler.from_config(model.scheduler_config), steps - len(timesteps))
    return reference_frames(model, image, steps, scheduler=scheduler, latents=latents, **guidance)


class _LastSteps:
    """A scheduler whose `timesteps`, as a pipeline reads them to loop, are the schedule's from
    `start` on; everything else is the wrapped scheduler's (which keeps the whole schedule)."""

    def __init__(self, scheduler, start: int):
        self.__dict__.update(_inner=scheduler, _start=start)

    @property
    def timesteps(self):
        return self._inner.timesteps[self._start :]

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)


class BranchContexts:
    """diffusers' cache hooks keep one state per CFG branch, named by the `cache_context` the
    pipeline enters around each transformer call — WanPipeline does, WanVideoToVideoPipeline (as
    of diffusers 0.42) does not, and the hooks refuse to run without one. This enters "cond" and
    "uncond" around alternate calls, as WanPipeline does (the v2v pipeline calls cond first, every
    step), on a transformer whose cache is enabled; `remove()` puts its forward back."""

    def __init__(self, transformer):
        self.transformer, self.calls = transformer, 0
        hooked = transformer.forward

        def forward(*args, **kwargs):
            name = ("cond", "uncond")[self.calls % 2]
            self.calls += 1
            with transformer.cache_context(name):
                return hooked(*args, **kwargs)

        transformer.forward = forward

    def remove(self):
        del self.transformer.forward
