"""A step cache at work in a host loop (the torch ranks' loop), written against `ops` and the
block-pass protocol (backends/torch/runners/block_pass.py): the decisions (decisions.py) say what each
step does; this object holds the arrays that carry over between steps, runs the block stack for
the cache, and logs what was skipped.

Its arrays are the `cache` of the loop's LoopState (the loop loads them at the start and hands
them back at the end), so a stopped and resumed run continues with the same residuals and
factors. Names: `residual` (MagCache), `taylor_f0…` (TaylorSeer), `fb_reference` and `fb_tail`
(First-Block Cache), and `log_skipped`, a host array (steps × CFG branches here: 1 skipped,
0 computed, −1 not run — yet, or at all: a step whose expert has guidance 1.0 runs the cond
branch only, `begin(i, active=1)`, and its uncond column stays −1).

The forward's rows are [branch 0 rows…, branch 1 rows…] (parallel/cfg_rows.py), `batch` rows
each; First-Block Cache decides per branch. When a controller holds both branches and they
decide differently, the block stack still runs on every row (the block function is built for
the whole batch) and the skipping branch takes its cached result — the video is what
per-branch skipping gives, but that step saves no work here (`block_forwards_discarded`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import first_block, magcache_calibration, taylor
from .decisions import PREDICT, PROBE, REUSE, CacheStep, skipped_steps
from .settings import CacheSettings


class CacheLogs:
    """The host logs a step cache keeps beside its arrays in LoopState.cache: `log_skipped`
    (steps × branches, int8) and, when calibrating, `log_calibration` (float64 means)."""

    settings: CacheSettings
    log: np.ndarray
    calibration: np.ndarray

    def with_logs(self, arrays: dict) -> dict:
        """The loop state's cache: the arrays and copies of the logs."""
        out = dict(arrays)
        out["log_skipped"] = self.log.copy()
        if self.settings.calibrate:
            out["log_calibration"] = self.calibration.copy()
        return out

    def take_logs(self, state: dict | None) -> dict:
        """Adopt a loop state's logs; returns its other entries (the arrays)."""
        state = dict(state or {})
        if "log_skipped" in state:
            self.log = np.asarray(state.pop("log_skipped"), np.int8).copy()
        if "log_calibration" in state:
            self.calibration = np.asarray(state.pop("log_calibration"), np.float64).copy()
        return state


class StepCache(CacheLogs):
    def __init__(
        self,
        settings: CacheSettings,
        plan: list[CacheStep],
        branches: list[str],
        batch: int,
        layers: int,
        valid,
        reduce: Callable,
        ops,
        lockstep: int | None = None,
    ):
        """branches: the CFG branch names of this controller's rows, in row order ("cond",
        "uncond"). valid: (1, L, 1) float32 device array, 1 on this shard's valid tokens.
        reduce(array) → host numpy array summed over every controller whose rows share these
        branches' decisions (the sequence-parallel group). lockstep: this controller's one
        branch when every controller must run the same block passes whatever its branch
        decides (memory=sharded's gathers span the world under CFG parallel): First-Block
        Cache's reduced sums then hold every branch, the stack runs when any branch
        computes, and a skipping branch takes its cached result."""
        self.settings, self.plan, self.branches = settings, plan, branches
        self.batch, self.layers, self.valid, self.reduce, self.ops = batch, layers, valid, reduce, ops
        self.lockstep = lockstep
        self.arrays: dict = {}
        self.log = np.full((len(plan), len(branches)), -1, np.int8)
        self.calibration = np.full((len(plan), len(branches)), np.nan, np.float64)
        self.index = 0
        self.active = len(branches)  # branches this step's forward runs: the first `active`

    # ------------------------------------------------------------ loop
    def begin(self, index: int, active: int) -> None:
        """Step `index`, whose forward runs the first `active` branches (2 → 1 where an expert's
        guidance is 1.0). Branches change only at the expert switch, where each expert starts
        fresh — so an array kept from an earlier step always has this step's rows."""
        self.index, self.active = index, active
        if self.plan[index].fresh and not self.settings.calibrate:
            self.arrays = {}  # a new expert: nothing of the previous one's cache is used

    @property
    def step(self) -> CacheStep:
        return self.plan[self.index]

    @property
    def skips_forward(self) -> bool:
        """The whole transformer is predicted this step (TaylorSeer): nothing runs."""
        return self.step.action == PREDICT

    def state(self) -> dict:
        return self.with_logs(self.arrays)

    def load(self, state: dict) -> None:
        self.arrays = {k: v for k, v in self.take_logs(state).items() if v is not None}

    def _mark(self, skipped: list[bool]) -> None:
        self.log[self.index, : len(skipped)] = np.asarray(skipped, np.int8)

    # ------------------------------------------------------------ TaylorSeer: the whole output
    def predicted(self):
        """The predicted float32 output of this step's forward."""
        self._mark([True] * self.active)
        return taylor.predict(self._factors(), self.step, self.ops)

    def computed(self, output) -> None:
        """After a computed forward (float32 output): TaylorSeer's factors follow it."""
        if self.settings.kind == "taylorseer":
            self.arrays.update(
                zip(
                    taylor.factor_names(self.settings.order),
                    taylor.update(self._factors(like=output), output, self.step, self.ops),
                )
            )
            self._mark([False] * self.active)

    def _factors(self, like=None) -> list:
        names = taylor.factor_names(self.settings.order)
        if names[0] not in self.arrays:
            return [self.ops.zeros_like(like) for _ in names]
        return [self.arrays[n] for n in names]

    # ------------------------------------------------------------ the block stack
    def run_stack(self, blocks_pass, block: Callable, x):
        """Blocks [0, n) on x as this step's cache says; the caller closes the pass."""
        step, kind = self.step, self.settings.kind
        if step.action == REUSE:
            self._mark([True] * self.active)
            return x + self.arrays["residual"]
        if step.action == PROBE:
            return self._first_block(blocks_pass, block, x)
        out = blocks_pass.run(block, x)
        if kind == "magcache":
            residual = out - x
            if self.settings.calibrate and "residual" in self.arrays:
                # across a switch between a guided and an unguided expert the two residuals'
                # branches differ: the ratio is measured on the branches both ran (cond)
                common = min(self.active, self.arrays["residual"].shape[0] // self.batch)
                rows = common * self.batch
                sums = self.reduce(
                    magcache_calibration.branch_ratio_sums(
                        residual[:rows], self.arrays["residual"][:rows], self.valid, common, self.ops
                    )
                )
                self.calibration[self.index, :common] = sums / self._valid_count()
            self.arrays["residual"] = residual
            self._mark([False] * self.active)
        return out

    def _valid_count(self) -> float:
        """Valid tokens × rows of one branch, over the whole group (the calibration mean's n)."""
        if not hasattr(self, "_count"):
            self._count = float(self.reduce(self.ops.sum(self.valid))) * self.batch
        return self._count

    def _first_block(self, blocks_pass, block: Callable, x):
        ops, n = self.ops, self.active
        h0 = blocks_pass.run(block, x, stop=1)
        residual = h0 - x
        if "fb_reference" not in self.arrays:
            compute = anyone = [True] * n
        else:
            sums = self.reduce(first_block.branch_sums(residual, self.arrays["fb_reference"], self.valid, n, ops))
            compute = anyone = first_block.computes(sums, self.settings.threshold)
            if self.lockstep is not None:
                compute = [anyone[self.lockstep]]
        self._mark([not c for c in compute])
        if not any(anyone):
            return h0 + self.arrays["fb_tail"]
        out = blocks_pass.run(block, h0)
        tail = out - h0
        if all(compute):
            self.arrays["fb_reference"], self.arrays["fb_tail"] = residual, tail
            return out
        # Branches differ: each takes its own rows from the computed or the cached side.
        rows = self.batch

        def per_branch(new, old):
            return ops.concat([(new if c else old)[b * rows : (b + 1) * rows] for b, c in enumerate(compute)], axis=0)

        cached = h0 + self.arrays["fb_tail"]
        self.arrays["fb_reference"] = per_branch(residual, self.arrays["fb_reference"])
        self.arrays["fb_tail"] = per_branch(tail, self.arrays["fb_tail"])
        return per_branch(out, cached)

    # ------------------------------------------------------------ the record
    def report(self, log=None, branches=None, calibration=None) -> dict:
        """The sidecar's "cache" record. `log`/`branches`/`calibration`: the whole run's
        (steps × branch) arrays when the branches live on several controllers (CFG parallel),
        else this one's."""
        return cache_record(
            self.settings,
            self.plan,
            self.layers,
            self.log if log is None else log,
            self.branches if branches is None else branches,
            self.calibration if calibration is None else calibration,
            shared_rows=len(self.branches) > 1,
        )

    def calibration_curve(self, calibration=None) -> list[float]:
        """The measured curve (official format) from steps 1 … N−1."""
        return measured_curve(self.calibration if calibration is None else calibration)


def cache_record(
    settings: CacheSettings,
    plan: list[CacheStep],
    layers: int,
    log,
    branches: list[str],
    calibration,
    shared_rows: bool,
) -> dict:
    """The sidecar's "cache" record from a run's (steps × branches) log (1 skipped, 0 computed,
    −1 not run) — one function for every backend, so their records read alike. `shared_rows`:
    one device group runs both branches' rows, so a First-Block step where they decide
    differently runs the stack for the skipping branch too (`block_forwards_discarded`)."""
    s = settings
    out = {"kind": s.kind, **s.record()}
    out["skipped"] = {name: [int(i) for i in np.flatnonzero(log[:, b] == 1)] for b, name in enumerate(branches)}
    blocks_when_skipped = 1 if s.kind == "fbcache" else 0
    ran = log >= 0
    out["block_forwards"] = int(np.sum(np.where(log == 1, blocks_when_skipped, layers) * ran))
    out["block_forwards_dense"] = int(np.sum(ran) * layers)
    if s.kind == "fbcache":  # present on every mesh, so records compare alike (0 when no rows are shared)
        split = (log == 1).any(axis=1) & (log == 0).any(axis=1)
        out["block_forwards_discarded"] = int(np.sum(split[:, None] * (log == 1)) * (layers - 1)) if shared_rows else 0
    if s.kind == "magcache" and not s.calibrate:
        out["planned_skips"] = skipped_steps(plan)
    if s.calibrate:
        out["measured_ratios"] = measured_curve(calibration)
    return out


def measured_curve(calibration) -> list[float]:
    """A calibration run's (steps × branches) means → the curve (official format), from steps
    1 … N−1."""
    return magcache_calibration.official_curve([list(row) for row in calibration[1:]])
