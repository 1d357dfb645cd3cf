"""Which Wan VAE a set of parameter names belongs to, whichever layout names them — the key map's
own detection (weights/vae_keymap.py), asked directly so a test can check that both layouts of one
VAE are told the same variant."""

from __future__ import annotations

from collections.abc import Iterable

from parallel_wan.weights.vae_keymap import _detect_diffusers, _detect_official


def detect_variant(names: Iterable[str]) -> str:
    """ "wan2.1" or "wan2.2" from the parameter names of either layout."""
    names = list(names)
    found = _detect_official(names) or _detect_diffusers(names)
    if found is None:
        raise ValueError(
            "cannot tell the Wan VAE variant from these parameter names (no down/up block "
            "names); pass variant='wan2.1' or 'wan2.2'"
        )
    return found
