"""diffusers' `WanPipeline` on a `video_models.RandomModel`'s modules (the weights our rows run),
timed per phase as our pipeline times itself: text (`encode_prompt`), denoise (from the texts to
the decode, every step synchronised through `callback_on_step_end`) and decode (`vae.decode`),
with the device's peak memory reset at each boundary."""

from __future__ import annotations

import time

import numpy as np
import torch

from parallel_wan.models.experts import HIGH, LOW


class PhaseClock:
    """Seconds and peak device memory per named phase, marked by `start(name)` / `stop(name)`
    calls from hooks; the device synchronised at each mark."""

    def __init__(self, device: torch.device):
        self.device, self.seconds, self.peak_gb, self.steps = device, {}, {}, []
        self._t0 = {}

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self, name: str) -> None:
        self.sync()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self._t0[name] = time.perf_counter()

    def stop(self, name: str) -> None:
        self.sync()
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - self._t0.pop(name)
        if self.device.type == "cuda":
            self.peak_gb[name] = max(self.peak_gb.get(name, 0.0), torch.cuda.max_memory_allocated(self.device) / 1e9)


def scheduler(model, sigmas):
    """The scheduler our run used: explicit sigmas (Lightning) through Euler with shift 1, as
    tests/references/test_few_step.py hands them to diffusers; else the checkpoint's UniPC."""
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    if sigmas is None:
        return UniPCMultistepScheduler.from_config(model.ckpt.scheduler_config)

    class Explicit(FlowMatchEulerDiscreteScheduler):
        def set_timesteps(self, num_inference_steps=None, device=None, **kwargs):
            super().set_timesteps(device=device, sigmas=list(sigmas))

    return Explicit(shift=1.0)


def run(model, spec, texts: list[str], device: torch.device) -> dict:
    """One video through `WanPipeline` with `spec`'s prompt, negative prompt, size, steps,
    guidance and seed: {"seconds": per phase + total, "peak_gb", "step_s", "frames" (uint8)}."""
    from diffusers import WanPipeline

    video, sampling = spec.video, spec.sampling
    pipe = WanPipeline(
        tokenizer=model.tokenizer,
        text_encoder=model.text_encoder,
        vae=model.vae,
        scheduler=scheduler(model, sampling.sigmas),
        transformer=model.experts[HIGH],
        transformer_2=model.experts[LOW],
        boundary_ratio=model.arch.boundary,
    )
    pipe.set_progress_bar_config(disable=True)
    clock = PhaseClock(device)
    encode, decode = pipe.encode_prompt, model.vae.decode

    def timed_encode(*args, **kwargs):
        clock.start("text")
        out = encode(*args, **kwargs)
        clock.stop("text")
        clock.start("denoise")
        return out

    def timed_decode(*args, **kwargs):
        clock.stop("denoise")
        clock.start("decode")
        out = decode(*args, **kwargs)
        clock.stop("decode")
        return out

    last = []

    def on_step(pipe_, i, t, kwargs):
        clock.sync()
        now = time.perf_counter()
        clock.steps.append(now - (last[-1] if last else clock._t0["denoise"]))
        last.append(now)
        return kwargs

    pipe.encode_prompt, model.vae.decode = timed_encode, timed_decode
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = pipe(
                prompt=texts[0],
                negative_prompt=texts[1] if len(texts) > 1 else None,
                height=video.height,
                width=video.width,
                num_frames=video.num_frames,
                num_inference_steps=sampling.steps,
                guidance_scale=sampling.guidance_high,
                guidance_scale_2=sampling.guidance_low,
                max_sequence_length=512,
                output_type="np",
                generator=torch.Generator("cpu").manual_seed(video.seed),
                callback_on_step_end=on_step,
            ).frames[0]
        clock.sync()
        total = time.perf_counter() - t0
    finally:
        del pipe.encode_prompt, model.vae.decode  # the modules' own methods again
    frames = np.round(np.clip(out, 0.0, 1.0) * 255.0).astype(np.uint8)  # as our pipeline rounds
    return {
        "seconds": {**clock.seconds, "total": total},
        "peak_gb": clock.peak_gb or None,
        "step_s": clock.steps,
        "frames": frames,
    }
