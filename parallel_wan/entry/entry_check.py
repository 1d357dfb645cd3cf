"""The one check of a generation's settings against its checkpoint and its device, before
anything loads: every entry of a prompt file (run.py validate_job), the command line's one, the
server's start settings' checkpoint and each request (serve/served.py). Cheap: no torch (the
server's HTTP process runs it for every request)."""

from __future__ import annotations


def check_entry(spec, ckpt=None, device: tuple | None = None):
    """The checkpoint's json and headers against `spec` (`ckpt`: an earlier entry's description —
    this one is checked against it, nothing read again; None: described now, which for the
    built-in tiny model reads nothing and stays None), then whether the video fits the model's
    positions and one device's memory (`device`: memory_plan.fits.device_memory's answer, asked
    before; None: asked now). Returns the checkpoint's description; raises ConfigError."""
    from ..memory_plan.fits import check_fits
    from ..pipeline.checkpoint import check_compatible, preflight

    if ckpt is None:
        ckpt = preflight(spec)
    else:
        check_compatible(spec, ckpt)
    check_fits(spec, ckpt, device=device)
    return ckpt
