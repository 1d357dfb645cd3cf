"""A batch: entries whose settings differ only in prompt, negative prompt and seed, run through
the denoiser together as one generation of several prompts (a server's queued requests,
serve/worker.py). Each member keeps its own seed and negative prompt (`VideoSettings.seeds`,
`negative_prompts`), and its video is the one the member makes alone on the same mesh: the
forward's rows are independent (one timestep row shared by every row, per-row norms and
attention), so on CPU the latents are equal bit for bit in float32 and bfloat16
(tests/serve/test_batching.py; BENCHMARKS.md "Serving" for what a GPU gives).

Not batched: a step cache (First-Block Cache decides from the whole batch's activations, so a
member would skip other steps than alone; the others' arrays are in the CFG row layout) —
such a request runs alone. Cheap: no torch."""

from __future__ import annotations

import dataclasses

from ..config import RunSpec
from .keys import deciding_settings, digest

# What may differ between the members of a batch.
PER_MEMBER = ("prompts", "negative_prompt", "seed")


def batch_key(spec: RunSpec) -> str | None:
    """What a batch's members share, as a hash (None: this entry runs alone). The image and a
    source video by content, as the result keys hash them: two uploads of one image batch."""
    if spec.cache.on or len(spec.video.prompts) != 1:
        return None
    if spec.video.s2v is not None or spec.video.animate is not None:  # one prompt a run (their loops)
        return None
    shared = {k: v for k, v in deciding_settings(spec).items() if k not in PER_MEMBER}
    return digest(shared)


def batch_sizes(mesh, most: int) -> list[int]:
    """The batch sizes this mesh runs, largest first, up to `most`: dp > 1 splits a batch's
    prompts into equal shares (one prompt alone carries the CFG halves over dp)."""
    return [k for k in range(most, 0, -1) if k == 1 or k % mesh.dp == 0]


def largest_batch(spec: RunSpec, ckpt, device: tuple, most: int) -> int:
    """The largest batch of at most `most` jobs like `spec` that this mesh splits (batch_sizes)
    and, by the planner, one device holds (`device`: memory_plan.fits.device_memory's answer).
    One job alone is always allowed: it was checked when it was accepted."""
    from ..config import ConfigError
    from ..memory_plan.fits import check_fits

    def fits(size: int) -> bool:
        try:
            check_fits(batched([spec] * size), ckpt, device=device)
        except ConfigError:
            return False
        return True

    return next(size for size in batch_sizes(spec.mesh, most) if size == 1 or fits(size))


def batched(specs: list[RunSpec]) -> RunSpec:
    """One generation of every member's prompt, each with its own seed and negative prompt; the
    rest is the first member's (the same for all: their batch keys agree)."""
    first = specs[0]
    if len(specs) == 1:
        return first
    video = dataclasses.replace(
        first.video,
        prompts=tuple(s.video.prompt for s in specs),
        seeds=tuple(s.video.seed for s in specs),
        negative_prompts=tuple(s.video.negative_prompt for s in specs),
    )
    return dataclasses.replace(first, video=video)


def member(gen, index: int, size: int):
    """Member `index`'s own generation out of a batch's: its video and latents; the record of
    its prompt and seed, and of the batch it ran in (the sidecar's "batch")."""
    from ..pipeline.generate import Generation

    info = dict(gen.info)
    info["videos"] = [gen.info["videos"][index]]
    info["batch"] = {"size": size, "index": index}
    return Generation(
        videos=[gen.videos[index]] if gen.videos else [],
        latents=None if gen.latents is None else gen.latents[index : index + 1],
        timings=gen.timings,
        info=info,
    )
