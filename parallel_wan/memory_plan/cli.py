"""`python -m parallel_wan.plan key=value … device_memory_gb=N`: compose the run's Hydra config,
validate it as the run does, print the plan; exit 0 fits, 1 does not fit, 2 a bad setting."""

from __future__ import annotations

import dataclasses
import sys

from ..config import ConfigError, RunSpec, resolve
from .report import plan, report


def main(argv: list[str]) -> int:
    from ..cli import front
    from ..config.compose import compose_settings

    overrides, budget = [], None
    for arg in front("plan", argv):
        if arg.startswith("device_memory_gb="):
            budget = arg.split("=", 1)[1]
        else:
            overrides.append(arg)
    try:
        if budget is None:
            raise ConfigError("device_memory_gb is missing; give the memory of one device, e.g. device_memory_gb=80 "
                              "(python -m parallel_wan.plan --help)")
        try:
            budget = float(budget)
        except ValueError:
            raise ConfigError(f"device_memory_gb={budget!r} is not a number; give e.g. device_memory_gb=80") from None
        if budget <= 0:
            raise ConfigError(f"device_memory_gb={budget:g} must be positive, e.g. device_memory_gb=80")
        text, fits = plan_report(compose_settings(overrides), budget)
    except ConfigError as exc:
        print(f"parallel_wan.plan: error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0 if fits else 1  # scripts can branch on it; a bad setting is 2


def plan_report(raw: dict, budget_gb: float) -> tuple[str, bool]:
    """(the plan as printed, whether it fits in `budget_gb`) for composed settings `raw`, on the
    world its mesh names. Raises ConfigError for a bad setting."""
    raw = {**raw, "output_dir": "unused"}
    mesh = raw.get("mesh") or {}
    world = int(mesh.get("dp", 1)) * int(mesh.get("cp", 1)) if str(mesh.get("dp", 1)).isdigit() else 1
    return report(plan(planning_spec(raw, world)), budget_gb)


def planning_spec(raw: dict, world: int) -> RunSpec:
    """`config.resolve` for planning: no weights are read, so a preset without checkpoint_dir
    is fine (its architecture is known); every other check is the run's."""
    model = dict(raw["model"])
    builtin = bool(model.get("builtin", False))
    spec = resolve({**raw, "model": {**model, "builtin": True}}, world)
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, builtin=builtin))
