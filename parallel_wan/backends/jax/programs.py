"""Jitted programs by everything their trace depends on besides argument shapes, so a process
that runs several generations (a server, a test session) compiles each program once. Shared by
the step programs (predictor.py) and the scanned loop (scan_loop.py)."""

from __future__ import annotations

_PROGRAMS: dict = {}


def cached_program(key, build):
    if key not in _PROGRAMS:
        _PROGRAMS[key] = build()
    return _PROGRAMS[key]


def mesh_key(mesh) -> tuple:
    return tuple(d.id for d in mesh.devices.flat), tuple(mesh.shape.items())
