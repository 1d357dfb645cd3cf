"""The transformer's inputs at a denoising step and the guided prediction from its output, written
once for every backend: a backend's noise predictor (torch's eager one, JAX's jitted step and its
scanned loop, the numpy test backend) holds the arrays and runs the forward on what these give.

Per step, from the controller's latent tokens x (B prompts × L tokens) and the step's t:
- the condition's channels joined to the noise's (I2V: the first-frame mask and image latent,
  one row that every prompt shares);
- the CFG rows: x once, or [x ‖ x] against the context's [prompts…, negative × B] rows
  (parallel/cfg_rows.py, the one CFG layout);
- the timestep as one row that every forward row uses, per token (TI2V: 0 where the first
  frame's latent is held) or one value. One row, not one per forward row: a CFG half alone
  (dp) would run its time embedding as a 1-row GEMM where both halves run a 2-row one, summed in
  another order, and in bf16 the whole video drifted (issue 38 item 9,
  tests/parallel/test_bf16_meshes.py);
- and after the forward, the two halves combined with the step's guidance.

Written against the backend's `ops` with shapes known when traced, so the same code runs
eagerly (torch, numpy) and inside JAX's jit and scan; `t` and `guidance` may be host numbers
or traced scalars.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models import animate_transformer as animate, s2v_transformer as s2v, transformer as dit
from ..parallel.cfg_rows import both_halves, context_rows, guided


@dataclass(frozen=True)
class StepRows:
    """The static layout of one expert's forward on this controller."""

    batch: int  # B: the prompts' rows of x
    halves: int  # CFG halves in the forward: 2 = [cond…, uncond…], 1 = one half
    per_token_timestep: bool  # TI2V: a timestep per token, else one per row
    patch_size: tuple[int, int, int]

    @property
    def rows(self) -> int:
        return self.halves * self.batch


def step_rows(task, expert: str) -> StepRows:
    """The layout of `expert`'s forward for a DenoiseTask (pipeline/denoise.py)."""
    tcfg = task.experts[expert][0]
    return StepRows(len(task.work.rows), task.halves(expert), task.per_token_timestep, tuple(tcfg.patch_size))


def widest_context_rows(task) -> list[int]:
    """The rows of `task.context` (every prompt, then the negative) that the widest forward of
    this controller reads, in the CFG layout; a forward of fewer rows reads the first of them
    (an unguided expert: the prompts)."""
    return context_rows(task.work.rows, task.prompts, task.uses_guidance, task.work.cfg_branch, task.negatives)


def timestep_mask(task) -> np.ndarray | None:
    """(L,) float32 host mask the per-token timestep is multiplied by: 0 on held tokens (TI2V's
    first frame), 1 elsewhere; None when no token is held (every token at t)."""
    if not task.per_token_timestep or task.fixed_mask is None:
        return None
    return np.ascontiguousarray(task.fixed_mask[:, 0], np.float32)


def condition_per_prompt(cond, batch: int, ops):
    """The condition tokens (1, L, F) repeated for the B prompts of x, for a backend that keeps
    them so (each step then joins them as they are); a condition with a row per prompt already
    (Animate's later segments: each prompt's own previous frames) as it is."""
    if cond is None or cond.shape[0] == batch:
        return cond
    return ops.concat([cond] * batch, axis=0)


def forward_inputs(layout: StepRows, x, t, context, cond, t_mask, ops):
    """(tokens, timestep, context) of the forward: x (B, L, F) with the condition's channels
    joined (cond: (1 or B, L, Fc), or None), in both CFG halves when the forward has two; the
    step's timestep t as one row, (1, L) per token — times t_mask (L,) when given — or (1,); the
    context's first `layout.rows` rows."""
    tokens = x
    if cond is not None:
        if cond.shape[0] != x.shape[0]:  # one row for every prompt
            cond = ops.broadcast_to(cond, (x.shape[0],) + tuple(cond.shape[1:]))
        tokens = dit.join_channels([x, cond], layout.patch_size, ops)
    tokens = both_halves(tokens, layout.halves, ops)  # [x…, x…] against [prompts…, negative × B]
    if layout.per_token_timestep:
        # made on the device (a fill): uploading a host array every step would wait for the device's queue
        timestep = ops.zeros((1, x.shape[1]), "float32", like=x) + t
        if t_mask is not None:
            timestep = timestep * ops.expand_dims(t_mask, 0)
    else:
        timestep = ops.zeros((1,), "float32", like=x) + t
    return tokens, timestep, context[: layout.rows]


def guided_prediction(layout: StepRows, out, guidance):
    """The forward's float32 rows → the guided prediction: uncond + g·(cond − uncond) over the
    two halves, or the one half as it is."""
    return guided(out, layout.batch, guidance) if layout.halves == 2 else out


def segment_inputs(params, arrays, cfg, work, backend, guided: bool):
    """Animate and S2V: the (cond, uncond) SegmentInputs of a segment's raw arrays
    (models/animate_transformer.SegmentArrays, s2v_transformer.SegmentArrays) made with the
    expert's weights as the predictor holds them, the pose cut to this controller's tokens (one
    process per device); uncond is None when no step guides."""
    if isinstance(arrays, s2v.SegmentArrays):  # the whole sequence is sharded: cut each part to this slice
        halves = s2v.cond_and_uncond(params, arrays, cfg, backend.ops, guided)
        video = arrays.pose_tokens.shape[1]
        return tuple(None if h is None else s2v.local_inputs(h, work.token_index(), video) for h in halves)
    halves = animate.cond_and_uncond(params, arrays, cfg, backend.ops, guided)
    return tuple(None if h is None else h._replace(pose=work.local(h.pose, backend)) for h in halves)


def segment_rows(inputs, layout: StepRows, cfg_branch: int | None, ops):
    """Animate's segment inputs (models/animate_transformer.SegmentInputs) for the forward's
    rows: `inputs` = (cond, uncond) with one row each — the same pose and image, and the
    unconditional half's face made from blank crops (diffusers' `face_pixel_values * 0 − 1`) —
    laid out as the rows are: [cond × B, uncond × B], or the one half this controller runs
    (its CFG branch under CFG parallel, else the cond)."""
    cond, uncond = inputs
    if layout.halves == 2:
        halves = [cond] * layout.batch + [uncond] * layout.batch
    else:
        halves = [uncond if cfg_branch == 1 else cond] * layout.batch
    if len(halves) == 1:
        return halves[0]
    return type(cond)(*(ops.concat(list(fields), axis=0) for fields in zip(*halves)))
