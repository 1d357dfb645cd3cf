"""backend=auto decided once per command, before the process joins its job (the join is the
backend's: backends/process.py)."""

from __future__ import annotations

from ..config import backend_name


def choose_backend(raw: dict) -> str | None:
    """backend=auto → torch or jax (launch/backend_choice.py), written into `raw`; returns why
    (None when the backend was named)."""
    if backend_name(raw) != "auto":
        return None
    from ..launch import detect
    from ..launch.backend_choice import choose_backend as choose

    name, why = choose(detect())
    raw["backend"] = {**(raw.get("backend") or {}), "name": name}
    return why
