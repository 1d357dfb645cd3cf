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
    if preview is None:
        return None
    sigmas = schedule.sigmas

    def watch(steps_done: int, x, pred) -> None:
        if not preview.wanted():
            return
        # x is at σ of `steps_done` (after the update), pred the step's velocity: for flow matching
        # x − σ·v is the clean latent the step aims at (exactly the one before the update, for Euler).
        x0 = x - float(sigmas[steps_done]) * pred
        tokens = gather_latent_tokens(x0, shapes.work, spec, backend)
        latents = dit.unpatchify(tokens, shapes.grid, shapes.transformer.patch_size, backend.ops)
        if backend.writes_outputs:
            preview.show(steps_done, backend.to_host(latents))

    return watch
