"""`python -m parallel_wan.plan key=value … device_memory_gb=N`: compose the run's Hydra config,
validate it as the run does, print the plan; exit 0 fits, 1 does not fit, 2 a bad setting."""

from __future__ import annotations

import dataclasses
import sys

from ..config import ConfigError, RunSpec, resolve
from .report import plan, report


def main(argv: list[str]) -> int:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from ..run import CONF_DIR

    overrides, budget = [], None
    for arg in argv:
        if arg.startswith("device_memory_gb="):
            budget = arg.split("=", 1)[1]
        else:
            overrides.append(arg)
    try:
        if budget is None:
            raise ConfigError("device_memory_gb is missing; give the memory of one device, e.g. device_memory_gb=80")
        try:
            budget = float(budget)
        except ValueError:
            raise ConfigError(f"device_memory_gb={budget!r} is not a number; give e.g. device_memory_gb=80") from None
        if budget <= 0:
            raise ConfigError(f"device_memory_gb={budget:g} must be positive, e.g. device_memory_gb=80")
        try:
            with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
                cfg = compose(config_name="config", overrides=overrides)
        except Exception as exc:  # Hydra's override errors (unknown group option, bad syntax)
            raise ConfigError(f"{str(exc).splitlines()[0]}") from None
        raw = OmegaConf.to_container(cfg, resolve=False)
        raw["output_dir"] = "unused"
        mesh = raw.get("mesh") or {}
        world = int(mesh.get("dp", 1)) * int(mesh.get("cp", 1)) if str(mesh.get("dp", 1)).isdigit() else 1
        spec = planning_spec(raw, world)
        text, fits = report(plan(spec), budget)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0 if fits else 1  # scripts can branch on it; a bad setting is 2


def planning_spec(raw: dict, world: int) -> RunSpec:
    """`config.resolve` for planning: no weights are read, so a preset without checkpoint_dir
    is fine (its architecture is known); every other check is the run's."""
    model = dict(raw["model"])
    builtin = bool(model.get("builtin", False))
    spec = resolve({**raw, "model": {**model, "builtin": True}}, world)
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, builtin=builtin))
