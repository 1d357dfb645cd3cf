"""The CFG row layout of a forward batch, one for both backends: [cond rows…, uncond rows…].

A forward runs B prompts' conditional rows, then B unconditional rows (the negative prompt
repeated), so the guided prediction is `uncond + g·(cond − uncond)` over the first and second
halves of the output. Under CFG parallel over dp (one prompt, dp = 2) each dp rank runs one
half: the dp exchange returns [cond, uncond] in dp order, the same layout. Rows are
independent through the whole forward, so the layout changes no number; keeping one means the
torch predictor, the JAX program, the planner and the byte counts agree on which row is which.
"""

from __future__ import annotations

from collections.abc import Sequence

COND, UNCOND = 0, 1  # dp index of each half under CFG parallel


def guides(guidance: float) -> bool:
    """Whether a step with this scale runs CFG. At 1.0 the guided prediction is the conditional
    one (uncond + 1·(cond − uncond)), so the step runs the cond rows only, as the Lightning
    reference decides per step (`use_cfg`); diffusers decides once per run, from guidance_scale."""
    return guidance != 1.0


def context_rows(
    prompts: Sequence[int], n_prompts: int, uses_guidance: bool, cfg_branch: int | None = None, negatives: int = 1
) -> list[int]:
    """Which row of the text context (every prompt, then the negative at index `n_prompts` — or,
    with `negatives` = n_prompts (a batch of requests), prompt i's own at n_prompts + i) each
    forward row reads: [prompts…], [prompts…, negatives…], or one half under CFG parallel
    (`cfg_branch` = COND or UNCOND)."""
    cond = list(prompts)
    uncond = [n_prompts + (p if negatives > 1 else 0) for p in prompts]
    if not uses_guidance:
        return cond
    if cfg_branch is None:
        return cond + uncond
    return cond if cfg_branch == COND else uncond


def halves_in_forward(uses_guidance: bool, cfg_branch: int | None = None) -> int:
    """CFG halves one forward runs: 2 (both here), else 1 (no guidance, or CFG parallel)."""
    return 2 if uses_guidance and cfg_branch is None else 1


def branch_names(uses_guidance: bool, cfg_branch: int | None = None) -> list[str]:
    """The CFG branches of a forward's rows, in row order (a step cache decides per branch)."""
    if not uses_guidance:
        return ["cond"]
    if cfg_branch is None:
        return ["cond", "uncond"]
    return [["cond", "uncond"][cfg_branch]]


def both_halves(x, halves: int, ops):
    """The forward's input rows for `halves` halves: x once, or [x ‖ x] for [cond…, uncond…]."""
    return ops.concat([x] * halves, axis=0) if halves == 2 else x


def guided(out, batch: int, guidance):
    """The guided prediction from a [cond rows…, uncond rows…] output of 2·batch rows."""
    cond, uncond = out[:batch], out[batch:]
    return uncond + guidance * (cond - uncond)
