"""A batch of entries (jobs/batch.py) through `generate` as one generation: resumed from its
members' saved states when they have them (all after the same step), stopped after any step.
A signal saves every member's own state and raises Preempted, as one entry's run does
(one_entry.py); another stop (a server's cancel of a member) hands the members' states back to
the caller, which keeps the ones still wanted."""

from __future__ import annotations

import logging

from ..pipeline.loop_state import load_loop_state, rank_stem
from .batch import batched
from .batch_states import batch_state, member_states
from .job import Entry, Job
from .one_entry import save_state, state_rank, stopped_message
from .preemption import Preempted
from .resume import state_dir

log = logging.getLogger("parallel_wan")


def generate_batch(
    job: Job, entries: list[Entry], ckpt, loaded, backend, flag, should_stop, progress=None, preview=None
):
    """(the batch's generation, the step it resumed from or None, the members' states when it
    stopped for another reason than a signal — else None). Every rank runs the same calls."""
    from ..pipeline import generate

    spec = batched([e.spec for e in entries])
    start, resumed = None, None
    saved = [state_dir(job.output_dir, e.name) for e in entries]
    if any(folder.is_dir() for folder in saved):
        states = [load_loop_state(rank_stem(folder, state_rank(backend)))[0] for folder in saved]
        start = batch_state(states, spec, backend)
        resumed = start.step
        log.info(
            "%s: resuming together from step %d of %d", ", ".join(e.name for e in entries), resumed, spec.sampling.steps
        )
    gen = generate(
        spec,
        backend,
        ckpt,
        progress=progress,
        start=start,
        components=loaded,
        should_stop=should_stop,
        preview=preview,
    )
    if gen.state is None:
        return gen, resumed, None
    states = member_states(gen.state, spec, backend)
    if backend.any_rank(flag.raised):  # a signal: every member's state saved, then go
        for entry, state in zip(entries, states):
            save_state(job, entry, state, backend, flag)
        names = ", ".join(e.name for e in entries)
        raise Preempted(
            stopped_message(
                flag,
                f"after step {gen.state.step} of {spec.sampling.steps} of {names}; each one's loop state is saved "
                f"in {state_dir(job.output_dir, '')}",
                job,
            )
        )
    return gen, resumed, states
