"""The PyTorch backend's noise prediction: eager, per rank, on this rank's token shard.

Each rank runs the forward on its Lc tokens for its rows: [cond rows ‖ negative × B] (both CFG
halves here), or one half under CFG parallel over dp, whose two predictions meet once per step
(`exchange_dp`); an expert whose guidance is 1.0 runs the cond rows only (task.halves).
Self-attention is the backend's sequence-parallel callable; the blocks run through the block
runner `runners.expert_runner` picks for the expert as placed. The forward's inputs and the CFG
combine are pipeline/model_inputs.py's, as every backend's.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import torch

from ...caching.host_cache import StepCache
from ...models import animate_transformer as animate, s2v_tokens, s2v_transformer as s2v, transformer as dit
from ...models.animate_face import face_runs
from ...models.rope import rope_tables
from ...parallel.cfg_rows import branch_names
from ...pipeline import model_inputs
from ..contract import NoisePredictor
from .fsdp import ShardedExpert
from .runners import CachedRunner, Compiler, expert_runner
from .swap import ExpertSwap


def _rope(task, tcfg, s2v_sequence: bool):
    """cos, sin of this rank's tokens: by their place in the token grid, or — S2V, whose work
    shards the video's tokens then the reference's and motion's — by each token's own position
    (models/s2v_tokens.py)."""
    index = task.work.token_index()
    if s2v_sequence:
        motion = task.segment_inputs.motion_latents is not None
        return s2v_tokens.sequence_rope(tcfg.attention_head_dim, task.grid, motion, index)
    return rope_tables(tcfg.attention_head_dim, task.grid, token_index=index)


def _sparse_attention(task, tokens: int):
    """sparse=radial's or sparse=svg's attention for the run's whole sequence (its mask over
    global positions)."""
    from ...parallel.block_visits import BlockMask
    from .sparse_attention import SparseAttention
    from .svg_attention import SpatioTemporalAttention

    settings, grid = task.sparse, tuple(task.grid)
    knob = settings.density if settings.kind == "svg" else settings.decay_factor
    mask = BlockMask(_block_mask(settings.kind, tokens, grid, settings.block, knob), settings.block, tokens)
    if settings.kind == "svg":
        return SpatioTemporalAttention(mask, grid, settings.dense_layers)
    return SparseAttention(mask, settings.dense_layers)


@functools.lru_cache(maxsize=4)
def _block_mask(kind: str, tokens: int, grid: tuple, block: int, knob: float):
    """The mask for a size, made once per process: radial's is 1.5 s of host work at 720p × 81,
    which a server or a prompt file would otherwise repeat before every video of that size.
    Read-only: every SparseAttention of that size shares it. knob: radial's decay factor, svg's
    density."""
    from ...parallel.radial_mask import radial_mask
    from ...parallel.svg_mask import svg_mask

    mask = svg_mask(tokens, grid[1] * grid[2], block, knob) if kind == "svg" else radial_mask(tokens, grid, block, knob)
    mask.flags.writeable = False
    return mask


class EagerNoisePredictor(NoisePredictor):
    """`predict(expert, x, t, guidance)` → the guided prediction (B, Lc, F) in float32.

    An expert's params may be a whole tree (memory=resident), an fsdp.ShardedExpert whose blocks
    gather one at a time (memory=sharded), or wait in host memory until `before_step` swaps them
    in (memory=swap, swap.ExpertSwap acting on the step plan); `runners.expert_runner` turns
    each into the forward's params and block runner. compile=true compiles the block function
    (runners.compiled), with self-attention wrapped once here so the compiled block's guard on
    it holds from step to step."""

    def __init__(self, task, backend):
        ops = self.ops = backend.ops
        self.task, self.backend = task, backend
        work = task.work
        tcfg = next(iter(task.experts.values()))[0]
        self.s2v = isinstance(task.segment_inputs, s2v.SegmentArrays)
        cos, sin = _rope(task, tcfg, self.s2v)
        self.rope = (backend.to_device(cos), backend.to_device(sin))
        self.compiler = Compiler(backend.compile_backend) if backend.compile else None
        self.sparse = None if task.sparse is None else _sparse_attention(task, work.shards.tokens)
        # (the planner's meta backend is handed no mask: its attention only makes buffers)
        sparse = {} if self.sparse is None else {"sparse": self.sparse}
        self.attention = backend.self_attention_for(work.shards, **sparse)
        if self.compiler is not None:
            self.attention = self.compiler.attention(self.attention)
        # The widest forward's context rows; an unguided expert reads the first B (the cond rows)
        self.context = ops.take(task.context, model_inputs.widest_context_rows(task), axis=0)
        self.batch = len(work.rows)
        self.cond_tokens = model_inputs.condition_per_prompt(task.cond_tokens, self.batch, ops)
        self.swap = ExpertSwap(task.experts, backend.device)
        # TI2V: 0 on the held first frame's tokens, 1 elsewhere. Uploaded once: uploading a host
        # array every step would wait for the device's queue.
        mask = model_inputs.timestep_mask(task)
        self.timestep_mask = None if mask is None else backend.to_device(mask)
        self.cache = None if task.cache_plan is None else self._step_cache(task, tcfg)
        # Animate and S2V: which latent frame each of this rank's (video) tokens is in (the face
        # adapters and audio injectors attend per frame), and the segment's inputs, made with the
        # weights at the first step
        self.face_runs = self.segment = None
        self.segment_rows: dict = {}  # CFG halves in the forward → the segment's inputs for its rows
        if task.segment_inputs is not None:
            index, grid = work.token_index(), task.grid
            if self.s2v:  # the work shards the whole sequence: the injectors see the video's tokens only
                index = index[index < math.prod(grid)]
            self.face_runs = face_runs(index, grid[1] * grid[2], grid[0]) if len(index) else ()

    def _step_cache(self, task, tcfg) -> StepCache:
        """The step cache of this rank's rows. First-Block Cache's sums (and a calibration's)
        are added over every rank whose rows decide together: the cp group — and under dp
        that splits prompts, the whole world (one device decides over the whole batch)."""
        work, backend = task.work, self.backend
        valid = (work.token_index() < work.shards.tokens).astype(np.float32)[None, :, None]
        axis = "cp" if work.cfg_branch is not None or backend.mesh.size("dp") == 1 else "world"

        def reduce(local):
            return backend.exchanges.sum_to_host(local, axis)

        # memory=sharded under CFG parallel: FSDP's block gathers span both dp halves, so the
        # halves must run the same block passes. Each rank puts its branch's sums in its row
        # of a (2, 2) array summed over the world: every rank gets both branches' group sums
        # (the same bits as the cp sums: the other half adds zeros).
        lockstep = None
        if (
            task.cache.kind == "fbcache"
            and work.cfg_branch is not None
            and any(isinstance(placed, ShardedExpert) for _, placed in task.experts.values())
        ):
            lockstep = work.cfg_branch

            def reduce(local):
                zero = torch.zeros_like(local)
                both = torch.cat([local, zero] if lockstep == 0 else [zero, local])
                return backend.exchanges.sum_to_host(both, "world")

        return StepCache(
            task.cache,
            task.cache_plan,
            branch_names(task.uses_guidance, work.cfg_branch),
            self.batch,
            tcfg.num_layers,
            backend.to_device(valid),
            reduce,
            self.ops,
            lockstep,
        )

    def cache_report(self) -> dict | None:
        """The sidecar's "cache" record; every rank calls it (CFG parallel: the two branches'
        logs meet over dp)."""
        if self.cache is None:
            return None
        if self.task.work.cfg_branch is None:
            return self.cache.report()

        def merged(host):
            local = torch.as_tensor(host, device=self.backend.device)
            return torch.cat(self.backend.exchange_dp(local), dim=1).cpu().numpy()

        return self.cache.report(merged(self.cache.log), ["cond", "uncond"], merged(self.cache.calibration))

    def sparse_report(self) -> dict | None:
        """The sidecar's "sparse" record; every rank calls it (CFG parallel, prompts over dp: the
        dp groups' counts are added)."""
        if self.sparse is None:
            return None
        tcfg = next(iter(self.task.experts.values()))[0]
        rows, calls = self.sparse.rows, self.sparse.calls
        if self.backend.mesh.size("dp") > 1:  # the other dp groups' counts: one small exchange after the loop
            counts = torch.tensor([rows, calls], dtype=torch.int64, device=self.backend.device)
            rows, calls = (int(n) for n in torch.stack(self.backend.exchange_dp(counts)).sum(0).cpu())
        mask = self.sparse.mask
        layouts = {}
        if self.task.sparse.kind == "svg":  # every rank's heads and rows: the one-device count
            local = self.sparse.layout_counts().to(self.backend.device)
            temporal, profiled = self.backend.exchanges.sum_to_host(local, "world")
            layouts = {"temporal_head_fraction": round(float(temporal / max(profiled, 1)), 6)}
        return {
            **self.task.sparse.record(),
            **layouts,
            "block_density": round(mask.block_density(), 6),  # the fraction of block pairs visited
            "pair_density": round(mask.visited_pairs() / mask.tokens**2, 6),  # of (query, key) pairs
            "sparse_attention_calls": calls,  # self-attention layers run sparse, over the dp groups
            "flops_skipped": mask.skipped_flops(rows, tcfg.num_attention_heads, tcfg.attention_head_dim),
        }

    def before_step(self, step) -> None:
        """Called by the denoise loop before each step: weight moves the plan asks for, and the
        step cache's step."""
        self.swap.before_step(step)
        if self.sparse is not None:  # dense for the first sparse_dense_steps steps
            self.sparse.start_step(step.index >= self.task.sparse_from_step)
        if self.cache is not None:
            self.cache.begin(step.index, self.task.halves(step.expert))

    def shard(self, x):
        """The rank already holds its own shard."""
        return x

    def __call__(self, expert: str, x, t: float, guidance: float):
        ops, task = self.ops, self.task
        tcfg, placed = task.experts[expert]
        params, run_blocks = expert_runner(expert, placed, self.compiler)
        cache = self.cache
        layout = model_inputs.step_rows(task, expert)
        if cache is not None and cache.skips_forward:  # TaylorSeer predicts the whole output
            with run_blocks.open(params["blocks"]):
                pass  # nothing runs; a swap exchange due this step still completes on close
            out = cache.predicted()
            return self._combine(out, guidance, layout)
        if cache is not None:
            run_blocks = CachedRunner(run_blocks, cache)
        tokens, ts, context = model_inputs.forward_inputs(
            layout, x, t, self.context, self.cond_tokens, self.timestep_mask, ops
        )
        if task.segment_inputs is not None:  # Animate: the pose, image and face of this segment
            if self.segment is None:
                self.segment = model_inputs.segment_inputs(
                    params, task.segment_inputs, tcfg, task.work, self.backend, task.uses_guidance
                )
            if layout.halves not in self.segment_rows:  # laid out once, not joined again every step
                self.segment_rows[layout.halves] = model_inputs.segment_rows(
                    self.segment, layout, task.work.cfg_branch, ops
                )
            inputs = self.segment_rows[layout.halves]
            model = s2v if self.s2v else animate
            out = model.forward(
                params, tokens, ts, context, inputs, self.rope, tcfg, ops, self.attention, run_blocks, self.face_runs
            )
        else:
            out = dit.forward(params, tokens, ts, context, self.rope, tcfg, ops, self.attention, run_blocks)
        out = ops.cast(out, "float32")
        if cache is not None:
            cache.computed(out)
        return self._combine(out, guidance, layout)

    def _combine(self, out, guidance: float, layout):
        """The forward's float32 rows → the guided prediction (CFG parallel: the halves meet
        first; one half here and no CFG parallel: the cond rows are the prediction)."""
        if self.task.work.cfg_branch is not None:
            out = self.ops.concat(self.backend.exchange_dp(out), axis=0)  # the two halves meet once per step
            layout = dataclasses.replace(layout, halves=2)
        return model_inputs.guided_prediction(layout, out, guidance)
