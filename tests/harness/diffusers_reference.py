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


def reference_frames(model, image=None, steps=STEPS, scheduler=None, cfg_on=None, boundary_ratio=None, **guidance):
    """diffusers' frames (uint8) for the tiny model; I2V pipeline when an image is given. The
    pipeline uses the model's own transformers, so caches enabled on them apply. `scheduler`:
    another than the checkpoint's UniPC; `cfg_on`: whether every step runs CFG (None: diffusers'
    rule, guidance_scale > 1 — it decides once per run, not per expert); `boundary_ratio`: another
    than the model's."""
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
    call = dict(
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_frames=NUM_FRAMES,
        num_inference_steps=steps,
        max_sequence_length=512,
        output_type="np",
        generator=torch.Generator("cpu").manual_seed(SEED),
        **guidance,
    )
    if image is None:
        pipe = pipeline(**components)
    else:
        # Wan 2.2 has no CLIP image branch
        pipe = pipeline(**components, image_encoder=None, image_processor=None)
        with Image.open(image) as im:
            call["image"] = im.convert("RGB")
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        return to_uint8(pipe(**call).frames[0])
