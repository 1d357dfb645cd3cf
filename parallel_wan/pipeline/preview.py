"""A progress preview of a running generation: after a step, when the caller's `preview.wanted()`
(a vote every rank answers alike) says a client is watching, the predicted clean latents
x̂₀ = x − σ·v meet on the main rank as the final latents do for the VAE (the one gather), and
`preview.show(steps_done, latents)` gets them there (host array, B×C×T'×h×w). What becomes of
them — images a server answers with — is the caller's (serve/previews.py); the projection is
report/previews.py's. No decode, no extra forward: one gather, only on the steps watched."""

from __future__ import annotations

from ..models import transformer as dit
from .local_work import gather_latent_tokens


def preview_watch(spec, schedule, shapes, backend, preview):
    """The denoise loop's `watch` for `preview` (None: no watch)."""
    return segment_watch(spec, schedule, shapes.work, shapes.grid, shapes.transformer.patch_size, backend, preview)


def segment_watch(spec, schedule, work, grid, patch_size, backend, preview, video_tokens=None, skip_frames=0):
    """The watch of one denoising loop of `grid`'s latents; Animate's and S2V's segments (their
    loops: pipeline/animate.py, s2v.py) show only the video's latents: S2V's first
    `video_tokens` tokens (its reference and motion tokens follow), Animate's frames after its
    `skip_frames` reference frame."""
    if preview is None:
        return None
    sigmas = schedule.sigmas

    def watch(steps_done: int, x, pred) -> None:
        if not preview.wanted():
            return
        # x is at σ of `steps_done` (after the update), pred the step's velocity: for flow matching
        # x − σ·v is the clean latent the step aims at (exactly the one before the update, for Euler).
        x0 = x - float(sigmas[steps_done]) * pred
        tokens = gather_latent_tokens(x0, work, spec, backend)
        if video_tokens is not None:
            tokens = tokens[:, :video_tokens]
        latents = dit.unpatchify(tokens, grid, patch_size, backend.ops)[:, :, skip_frames:]
        if backend.writes_outputs:
            preview.show(steps_done, backend.to_host(latents))

    return watch
