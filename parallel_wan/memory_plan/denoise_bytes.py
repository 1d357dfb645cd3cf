"""The denoise phase's tensors beside the weights on rank 0: the run's own loop and noise
predictor, on meta tensors of the rank's shapes (meta_backend.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import RunSpec
from ..models import latent, s2v_tokens
from ..models.transformer import patch_grid
from ..parallel.cfg_rows import halves_in_forward
from ..parallel.shards import SequenceShards
from ..parallel.work import RankWork, rank_work
from .architecture import transformer_shapes

PLAN_STEPS = 3  # the sampler's state is full from the third step on (UniPC: last sample and two x0)
# Beyond this many tokens per rank the loop is run at two smaller videos and extrapolated
# (`denoise_bytes`): the predictor builds its RoPE tables and token index for real (on the
# host, O(tokens)), which for a video of millions of tokens would itself take seconds and GBs.
RUN_TOKENS = 65_536


@dataclass(frozen=True)
class RankShapes:
    tokens: int  # N: valid tokens of one video
    local: int  # Lc: tokens per rank, padding included
    rows: int  # forward rows per rank (CFG halves × prompts here)
    latent_shape: tuple
    batch: int = 1  # prompts denoised on this rank (len(work.rows))
    halves: int = 1  # CFG halves in this rank's forward (2: both here; 1: none, or CFG parallel)
    cfg_branch: int | None = None  # CFG parallel over dp: this rank's half


def rank_shapes(spec: RunSpec, tcfg, vcfg) -> RankShapes:
    """The shapes `pipeline.generate` gives rank 0 (its work: `parallel.work.rank_work`)."""
    video = spec.video
    latent_shape = latent.latent_shape(
        video.num_frames, video.height, video.width, tcfg.out_channels, vcfg, spec.model.variant.reference_frames
    )
    grid = patch_grid(tcfg, latent_shape)
    tokens = math.prod(grid)
    if tcfg.s2v is not None:  # S2V's sequence goes on: the reference's and the motion's tokens (a later clip's)
        tokens += len(s2v_tokens.extra_kinds(grid[1], grid[2], motion=True))
    work = rank_work(spec.mesh, len(spec.video.prompts), tokens, rank=0)
    # the widest forward: both CFG halves when any expert guides (an unguided expert runs one)
    halves = halves_in_forward(spec.uses_guidance, work.cfg_branch)
    batch = len(work.rows)
    return RankShapes(tokens, work.shards.local, batch * halves, latent_shape, batch, halves, work.cfg_branch)


def _work(spec: RunSpec, shapes: RankShapes) -> RankWork:
    shards = SequenceShards(shapes.tokens, spec.mesh.cp)
    if shards.local != shapes.local:
        raise ValueError(
            f"{shapes.tokens} tokens over cp={spec.mesh.cp} are {shards.local} per rank, "
            f"not the {shapes.local} of these shapes; make them with rank_shapes"
        )
    return RankWork(shards, 0, tuple(range(shapes.batch)), shapes.cfg_branch)


def _meta_expert(tcfg, dtype: str):
    """The expert's param tree on the meta device with two blocks (the carry between blocks
    is seen; later blocks repeat the second's peak)."""
    import torch

    from ..backends.torch import ops as torch_ops
    from ..models import transformer as dit
    from ..weights.tree import unflatten

    tdtype = torch_ops.dtype(dtype)
    flat = {
        n: torch.empty(s, dtype=torch.float32 if dit.keeps_fp32(n) else tdtype, device="meta")
        for n, s in transformer_shapes(tcfg).items()
        if not n.startswith("blocks.") or n.startswith("blocks.0.")
    }
    params = unflatten(flat)
    params["blocks"] = [params["blocks"][0]] * 2
    return params


@dataclass(frozen=True)
class DenoiseBytes:
    held: int  # made before the loop and kept through it: the text context (every prompt and the
    #            negative) and the rank's guidance rows, the RoPE tables, I2V condition tokens,
    #            the initial noise (generate keeps it), and a step cache's arrays (cache_bytes)
    loop: int  # peak of what the loop's ops hold: the sample, the sampler's state, the previous
    #            prediction, the predictor's CFG concat and timesteps, the forward's activations
    #            and its fp32 output, the guidance combine

    @property
    def total(self) -> int:
        return self.held + self.loop


def denoise_bytes(spec: RunSpec, tcfg, shapes: RankShapes, vcfg=None) -> DenoiseBytes:
    """`pipeline.denoise.denoise` (the sampler) driving the run's `EagerNoisePredictor` (CFG
    rows, timesteps, the forward, the sequence-parallel attention, the dp exchange, the guidance
    combine) for PLAN_STEPS steps, on meta tensors of the rank's shapes (`MetaBackend`).

    Over RUN_TOKENS tokens per rank (and `vcfg` given) it is run for two shorter, lower videos of
    about RUN_TOKENS / 2 and RUN_TOKENS tokens per rank and extrapolated along the token count:
    every tensor the loop holds is a fixed size (the text) or rows × tokens × a fixed width, so
    past a few thousand tokens each count is a straight line in the tokens per rank
    (tests/unit/test_plan_bound.py holds the extrapolation to the direct count)."""
    if vcfg is not None and shapes.local > RUN_TOKENS:
        (l1, b1), (l2, b2) = (
            (s.local, _denoise_bytes(spec.replace(num_frames=f, height=h), tcfg, s))
            for f, h, s in (_smaller(spec, tcfg, vcfg, RUN_TOKENS // 2), _smaller(spec, tcfg, vcfg, RUN_TOKENS))
        )

        def line(a: int, b: int) -> int:
            return round(b + (b - a) / (l2 - l1) * (shapes.local - l2))

        return DenoiseBytes(line(b1.held, b2.held), line(b1.loop, b2.loop))
    return _denoise_bytes(spec, tcfg, shapes)


def _smaller(spec: RunSpec, tcfg, vcfg, target: int) -> tuple[int, int, RankShapes]:
    """(num_frames, height, rank shapes) of this video cut short in time — and, when one latent
    frame alone is over `target` tokens per rank, in height — to about `target` tokens per rank."""
    ss = vcfg.scale_factor_spatial
    pt, ph, pw = tcfg.patch_size
    frames, height = spec.video.num_frames, spec.video.height
    per_frame = (height // ss // ph) * (spec.video.width // ss // pw) / spec.mesh.cp
    latent_frames = max(1, min(latent.latent_frames(frames, vcfg), round(target / per_frame) * pt))
    frames = latent.video_frames(latent_frames, vcfg)
    if per_frame > target:  # a frame is too many tokens already: fewer rows of patches too
        height = max(1, round(target / (spec.video.width // ss // pw) * spec.mesh.cp)) * ss * ph
    small = spec.replace(num_frames=frames, height=height)
    return frames, height, rank_shapes(small, tcfg, vcfg)


def _denoise_bytes(spec: RunSpec, tcfg, shapes: RankShapes) -> DenoiseBytes:
    import numpy as np
    import torch

    from ..measure.live_bytes import LiveBytes, held_bytes
    from ..models import transformer as dit
    from ..pipeline.denoise import DenoiseTask, denoise
    from ..sampling import make_schedule
    from .meta_backend import META, MetaBackend

    backend = MetaBackend(spec.mesh)
    ops = backend.ops
    params = _meta_expert(tcfg, spec.execution.dtype)
    patch = math.prod(tcfg.patch_size)
    n = len(spec.video.prompts)
    # generate casts the context to the run's dtype; the negative prompt only when some expert guides
    context = torch.empty(
        (n + int(spec.uses_guidance), tcfg.text_len, tcfg.text_dim), dtype=ops.dtype(spec.execution.dtype), device=META
    )
    extra_channels = tcfg.in_channels - tcfg.out_channels
    task_cond = None
    if extra_channels:  # I2V: the condition's channels, joined to the noise tokens
        task_cond = torch.empty((1, shapes.local, patch * extra_channels), device=META)
    variant = spec.model.variant
    fixed_mask = np.ones((shapes.local, 1), np.float32) if variant.holds_frames(spec.video.inputs) else None
    task = DenoiseTask(
        {name: (tcfg, params) for name in variant.experts},
        context,
        n,
        _work(spec, shapes),
        dit.patch_grid(tcfg, shapes.latent_shape),
        spec.uses_guidance,
        per_token_timestep=variant.per_token_timestep,
        cond_tokens=task_cond,
        fixed_mask=fixed_mask,
        # sparse=svg holds more than dense attention (its gathered q/k/v, its profile's scores):
        # every counted step runs it. radial's kernel holds what a dense one does.
        sparse=spec.sparse_attention if spec.sparse_attention.kind == "svg" else None,
        sparse_from_step=0,
    )
    predictor = backend.noise_predictor(task)
    x = torch.empty((shapes.batch, shapes.local, patch * tcfg.out_channels), device=META)
    held = held_bytes(context, predictor.context, predictor.rope, predictor.cond_tokens, predictor.timestep_mask, x)
    if task_cond is not None:
        held += held_bytes(task_cond)
    held += cache_bytes(spec, tcfg, shapes)
    loop_spec = spec.replace(memory="resident")  # weight moves are counted in weight_bytes
    # Under inference mode, as the run (backend.inference_mode()): outside it the ops dispatch
    # differently (linear → t + addmm, the norms decomposed) and the tiny model's loop counted
    # 30 % more than the run holds.
    with torch.inference_mode(), LiveBytes() as live:
        out = denoise(
            loop_spec, make_schedule("official", PLAN_STEPS, spec.sampling.shift), x, predictor, lambda it: it, ops
        )
        del out
    return DenoiseBytes(held, live.peak)


def cache_bytes(spec: RunSpec, tcfg, shapes: RankShapes) -> int:
    """What a step cache keeps between steps on a rank (caching/host_cache.py), counted from
    the shapes (the first-block decision reads values, which meta tensors have none of):
    MagCache one block-stack residual (rows × Lc × dim, the run's dtype), First-Block Cache two
    (block 0's residual and the tail's), TaylorSeer order + 1 float32 copies of the output."""
    kind = spec.cache.kind
    width = 4 if spec.execution.dtype == "float32" else 2
    stack = shapes.rows * shapes.local * tcfg.dim * width
    if kind == "magcache":
        return stack
    if kind == "fbcache":
        return 2 * stack
    if kind == "taylorseer":
        return (spec.cache.order + 1) * shapes.rows * shapes.local * math.prod(tcfg.patch_size) * tcfg.out_channels * 4
    return 0
