"""First-Block Cache's decision, written once against `ops`: run block 0; compare its residual
r = out₀ − in₀ with the residual of the last computed step (relative L1: mean|r − r_ref| /
mean|r_ref|, diffusers' FirstBlockCacheConfig); skip the other blocks when the change is at most
the threshold, reusing their cached residual (out_last − out₀).

The means run over each CFG branch's rows and over *every* token of the sequence — so under
sequence parallelism a rank's sums over its valid tokens are added over the group before
anyone decides, and every rank of the group takes the same branch (a rank deciding on its own
shard is how the peers hang). Padded tokens are masked out.
"""

from __future__ import annotations


def branch_sums(residual, reference, valid, branches: int, ops):
    """(branches, 2) float32: per CFG branch, [Σ|r − r_ref|, Σ|r_ref|] over its rows and this
    shard's valid tokens (`valid`: (1, L, 1), 1 on valid tokens)."""
    r = ops.cast(residual, "float32")
    ref = ops.cast(reference, "float32")
    rows = r.shape[0] // branches
    sums = []
    for b in range(branches):
        part = slice(b * rows, (b + 1) * rows)
        sums.append(ops.stack([ops.sum(abs(r[part] - ref[part]) * valid), ops.sum(abs(ref[part]) * valid)]))
    return ops.stack(sums)


def computes(sums, threshold: float) -> list[bool]:
    """Per branch, from the group's summed (branches, 2) host array: compute the other blocks
    when the relative change is above the threshold (diffusers: `diff > threshold`)."""
    return [not (float(a) / float(b) <= threshold) if b != 0 else True for a, b in sums]
