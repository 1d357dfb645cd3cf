"""The per-step model inputs are written once (issue 39 item 1): pipeline/model_inputs.py joins
the condition's channels, doubles the CFG rows, makes the one-row timestep and combines the two
halves with guidance; every backend's predictor calls it and only runs the forward."""

import re
from pathlib import Path

import numpy as np
from harness.numpy_backend import ops
from harness.paths import PACKAGE, REPO

from parallel_wan.models import transformer as dit
from parallel_wan.pipeline.model_inputs import StepRows, forward_inputs, guided_prediction

HOME = Path(PACKAGE) / "pipeline" / "model_inputs.py"
# the pieces of a step's inputs; their definitions live in models/ and parallel/
PIECES = re.compile(r"\b(join_channels|both_halves|guided)\(")


def test_only_model_inputs_assembles_a_steps_inputs():
    predictors = [*Path(PACKAGE).rglob("*.py"), Path(REPO) / "tests" / "harness" / "numpy_backend.py"]
    found = []
    for path in predictors:
        if path == HOME or path.parent.name in ("models", "parallel"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PIECES.search(line) and not line.lstrip().startswith("def "):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, found
    callers = [p for p in predictors if "model_inputs.forward_inputs(" in p.read_text()]
    names = sorted(str(p.relative_to(REPO)) for p in callers)
    assert names == [
        "parallel_wan/backends/jax/cached_step.py",
        "parallel_wan/backends/jax/predictor.py",
        "parallel_wan/backends/torch/predictor.py",
        "tests/harness/numpy_backend.py",
    ]


def test_the_inputs_of_a_guided_per_token_step_with_a_condition():
    rng = np.random.default_rng(0)
    patch = (1, 2, 2)
    x = rng.standard_normal((2, 6, 4 * 3)).astype(np.float32)  # 2 prompts, 6 tokens, 3 channels
    cond = rng.standard_normal((1, 6, 4 * 5)).astype(np.float32)  # one row of 5 channels
    context = rng.standard_normal((4, 7, 8)).astype(np.float32)  # [prompt, prompt, negative, negative]
    mask = np.array([0, 0, 1, 1, 1, 1], np.float32)  # the first frame's two tokens held
    layout = StepRows(batch=2, halves=2, per_token_timestep=True, patch_size=patch)

    tokens, timestep, rows = forward_inputs(layout, x, np.float32(700.0), context, cond, mask, ops)
    joined = dit.join_channels([x, np.concatenate([cond, cond])], patch, ops)
    assert np.array_equal(tokens, np.concatenate([joined, joined]))
    assert np.array_equal(timestep, 700.0 * mask[None]) and timestep.dtype == np.float32
    assert np.array_equal(rows, context)

    one_row = StepRows(batch=2, halves=1, per_token_timestep=False, patch_size=patch)
    tokens, timestep, rows = forward_inputs(one_row, x, 700.0, context, None, None, ops)
    assert np.array_equal(tokens, x) and np.array_equal(timestep, [700.0]) and np.array_equal(rows, context[:2])

    out = rng.standard_normal((4, 6, 12)).astype(np.float32)
    assert np.array_equal(guided_prediction(layout, out, 3.0), out[2:] + 3.0 * (out[:2] - out[2:]))
    half = out[:2]
    assert guided_prediction(one_row, half, 3.0) is half
