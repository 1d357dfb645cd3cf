"""Transformer forwards per video — work that does not depend on the hardware — for the real
model presets, dense against the step caches and the Lightning recipe, from the runs' own plans
(pipeline/steps.py, caching/decisions.py; no weights needed). A forward is one CFG row through the
whole block stack; a CFG step costs two.

    python -m benchmarks.forward_counts

First-Block Cache decides from activations, so its count is known only after a run; it is not
in this table (the sidecar's "cache" record has it for every run).
"""

from __future__ import annotations

import dataclasses

from parallel_wan.caching.decisions import COMPUTE
from parallel_wan.pipeline.steps import pick_schedule, step_cache_plan, step_plan

from .tiny_generation import compose_spec

MODELS = {"wan2.2_t2v_a14b": [], "wan2.2_i2v_a14b": [], "wan2.2_ti2v_5b": []}
LIGHTNING = {"wan2.2_t2v_a14b": "wan2.2_t2v_a14b_lightning", "wan2.2_i2v_a14b": "wan2.2_i2v_a14b_lightning"}


class NoScheduler:
    scheduler_config = None  # the official schedule: what the published MagCache curves were measured on


def forwards(overrides: list[str]) -> tuple[int, int]:
    """(forwards, steps) of the run these settings describe."""
    spec = compose_spec(["checkpoint_dir=/tmp", "schedule=official", *overrides], 1)
    spec = dataclasses.replace(spec, model=dataclasses.replace(spec.model, builtin=True))
    plan = step_plan(spec, pick_schedule(spec, NoScheduler())[1])  # official, or a recipe's explicit sigmas
    cache = step_cache_plan(spec, NoScheduler(), plan)
    total = 0
    for i, step in enumerate(plan):
        if cache is None or cache[i].action == COMPUTE:
            total += 1 if step.guidance == 1.0 else 2
    return total, len(plan)


def main() -> None:
    import os
    import tempfile

    from PIL import Image

    from parallel_wan.run import CONF_DIR

    frame = os.path.join(tempfile.mkdtemp(prefix="forward_counts_"), "frame.png")
    Image.new("RGB", (64, 64), (90, 120, 150)).save(frame)  # I2V settings need a first frame to resolve
    print("| model | run | steps | transformer forwards | vs dense |")
    print("|---|---|---|---|---|")
    for model in MODELS:
        image = [f"image={frame}"] if "_i2v_" in model else []
        rows = [
            ("dense, 40/50 steps with CFG", []),
            ("cache=magcache (preset)", ["cache=magcache"]),
            ("cache=taylorseer (5, 3, 1)", ["cache=taylorseer"]),
        ]
        lightning = LIGHTNING.get(model)
        if lightning and os.path.exists(os.path.join(CONF_DIR, "model", lightning + ".yaml")):
            rows.append(("Lightning (4 steps, no CFG)", ["__model__=" + lightning]))
        dense = None
        for label, extra in rows:
            chosen = next((e.split("=", 1)[1] for e in extra if e.startswith("__model__=")), model)
            extra = [e for e in extra if not e.startswith("__model__=")]
            n, steps = forwards([f"model={chosen}", *image, *extra])
            dense = dense or n
            print(f"| {model} | {label} | {steps} | {n} | {n / dense:.3f} |")


if __name__ == "__main__":
    main()
