"""The JAX step cache as the host loop sees it: the duck interface of caching/host_cache.py's
StepCache that pipeline/denoise.py drives (`begin(index)`, `load(state)`, `state()`), around
arrays instead of work.

The plan (caching/decisions.py) becomes a table of per-step numbers the compiled step reads as data
(`row(index)`; the scanned loop takes the whole table). The cache arrays (MagCache's residual,
TaylorSeer's factors, First-Block Cache's reference and tail) always exist, zeros until a step
fills them, so the program's signature never changes; a step that starts an expert ignores
them (its plan row says `fresh`), which is the torch loop's reset. The per-step decisions stay
on the device as the step returns them and are read once, when the loop's state or the
sidecar record is asked for: no host round trip per step.
"""

from __future__ import annotations

import math

import numpy as np

from ...caching.decisions import CacheStep
from ...caching.host_cache import CacheLogs, cache_record
from ...caching.settings import CacheSettings


def plan_table(plan: list[CacheStep], order: int) -> dict[str, np.ndarray]:
    """The plan as (steps,) arrays (`coef`: (steps, order + 1)): CacheStep.as_row()'s numbers,
    plus `first` (step 0: a calibration has no previous residual) and TaylorSeer's prediction
    coefficients offsetᵏ / k! for the factors it sums (0 past them), in float64 as
    caching/taylor.py computes them, then float32."""
    rows = [step.as_row() for step in plan]
    table = {k: np.asarray([r[k] for r in rows], np.int32) for k in ("action", "fresh", "terms", "delta")}
    table["first"] = (np.arange(len(plan)) == 0).astype(np.int32)
    coef = np.zeros((len(plan), order + 1), np.float64)
    for i, step in enumerate(plan):
        for k in range(min(step.terms, order + 1)):
            coef[i, k] = (step.offset**k) / math.factorial(k)
    table["coef"] = coef.astype(np.float32)
    return table


def _host(array) -> np.ndarray:
    """A replicated device array's value (one local copy: works on every host)."""
    return np.asarray(array.addressable_data(0))


class JaxStepCache(CacheLogs):
    def __init__(
        self,
        settings: CacheSettings,
        plan: list[CacheStep],
        branches: list[str],
        layers: int,
        zeros: dict,
        shared_rows: bool,
    ):
        """zeros: name → the cache array before any step filled it (shaped and sharded as the
        step keeps it). shared_rows: one device group runs both CFG branches' rows (the
        record's `block_forwards_discarded`)."""
        self.settings, self.plan, self.branches, self.layers = settings, plan, branches, layers
        self.table = plan_table(plan, max(settings.order, 0))
        self.zeros, self.shared_rows = zeros, shared_rows
        self.arrays = dict(zeros)
        self.log = np.full((len(plan), len(branches)), -1, np.int8)
        self.calibration = np.full((len(plan), len(branches)), np.nan, np.float64)
        self.pending: list = []  # (first step, device decisions, stacked over steps?)
        self.index = 0

    # ------------------------------------------------------------ the loop
    def begin(self, index: int) -> None:
        self.index = index

    def row(self) -> dict:
        """This step's plan numbers, as host scalars the step takes as data."""
        return {k: v[self.index] for k, v in self.table.items()}

    def rows(self, start: int, stop: int) -> dict:
        return {k: v[start:stop] for k, v in self.table.items()}

    def after_step(self, arrays: dict, decisions: dict) -> None:
        self.arrays = arrays
        self.pending.append((self.index, decisions, False))

    def after_steps(self, start: int, arrays: dict, decisions: dict) -> None:
        """After a scanned range from `start`: decisions carry a leading step axis."""
        self.arrays = arrays
        self.pending.append((start, decisions, True))

    def load(self, state: dict) -> None:
        state = self.take_logs(state)
        self.pending = []
        self.arrays = {k: state[k] if state.get(k) is not None else z for k, z in self.zeros.items()}

    def state(self) -> dict:
        self._read_decisions()
        return self.with_logs(self.arrays)

    def _read_decisions(self) -> None:
        for start, decisions, stacked in self.pending:
            skipped = _host(decisions["skipped"])
            skipped = skipped if stacked else skipped[None]
            self.log[start : start + len(skipped)] = skipped
            if "calibration" in decisions:
                measured = _host(decisions["calibration"])
                self.calibration[start : start + len(skipped)] = measured if stacked else measured[None]
        self.pending = []

    # ------------------------------------------------------------ the record
    def report(self) -> dict:
        self._read_decisions()
        return cache_record(
            self.settings, self.plan, self.layers, self.log, self.branches, self.calibration, self.shared_rows
        )
