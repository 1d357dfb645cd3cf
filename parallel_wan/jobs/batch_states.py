"""A batch's loop state and its members' own (jobs/batch.py): a member's state is the one it
would have run alone on the same mesh, so a stopped batch saves one state per member, and any
members stopped after the same step resume together, in any grouping, or alone.

Alone, a member is one prompt: every rank holds its rows of the rank's token shard (under
dp = 2 both dp groups do: CFG parallel). In a batch the rank holds the prompts of its work
(parallel/work.prompt_rows): all of them — one controller, dp = 1, CFG parallel — or its dp
group's share, which the dp groups exchange once to split the state. Only states without
step-cache arrays are split (batch.batch_key runs a step cache alone)."""

from __future__ import annotations

import numpy as np

from ..parallel.work import prompt_rows
from ..pipeline.loop_state import LoopState


def member_states(state: LoopState, spec, backend) -> list[LoopState]:
    """Every member's state (host arrays, one prompt each), in the batch's order. Every rank
    calls it (a dp exchange when the dp groups split the prompts)."""
    members = len(spec.video.prompts)
    rank = None if backend.single_controller else backend.rank
    split = len(prompt_rows(spec.mesh, members, rank)) < members

    def every_row(a):
        if split:
            a = backend.ops.concat(backend.exchange_dp(a), axis=0)
        return a if isinstance(a, np.ndarray) else backend.to_host(a)

    whole = state.map(every_row)
    return [whole.map(lambda a, i=i: a[i : i + 1]) for i in range(members)]


def batch_state(states: list[LoopState], spec, backend) -> LoopState:
    """The batch's state on this rank from its members' (host arrays, as loaded or split): the
    rows of the prompts this rank denoises. Every member must be at the same step."""
    steps = {s.step for s in states}
    if len(steps) != 1:
        raise ValueError(f"a batch's members resume from one step; these are at steps {sorted(steps)}")
    rank = None if backend.single_controller else backend.rank
    mine = [states[i] for i in prompt_rows(spec.mesh, len(states), rank)]

    def rows(get):
        parts = [get(s) for s in mine]
        return None if parts[0] is None else np.concatenate(parts, axis=0)

    first = mine[0]
    return LoopState(
        first.step,
        rows(lambda s: s.latents),
        {k: rows(lambda s, k=k: s.sampler[k]) for k in first.sampler},
        {},
    )
