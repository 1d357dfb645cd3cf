"""One entry of a job on the loaded model — what the batch runner (runner.py) and the server
(serve/worker.py) both run: the saved loop states an entry may resume from (checked before
anything loads), the generation resumed from its state, stopped after any step, and its state
saved on a signal (Preempted, exit 75); and, under memory=swap, the experts loaded again
between two videos.

Every rank runs the same calls (the decisions read files on the shared output folder and votes
taken over the ranks), so no rank waits in a collective another rank skipped.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ..backends import single_controller
from ..pipeline.checkpoint import load
from ..pipeline.loop_state import load_loop_state, rank_stem, save_loop_state
from .job import Entry, Job
from .keys import digest, state_settings
from .preemption import PREEMPTED_EXIT, Preempted, write_marker
from .resume import saved_state, state_dir

log = logging.getLogger("parallel_wan")


def state_files(job: Job) -> int:
    """Loop-state files per entry: one per rank of a one-process-per-device backend (torch); one
    for a single controller's global arrays (JAX). Asked before the backend exists."""
    return 1 if single_controller(job.base.execution.backend) else job.base.mesh.world_size


def state_key(spec, world: int) -> tuple[str, dict]:
    settings = state_settings(spec, world)
    return digest(settings), settings


def check_saved_states(job: Job) -> dict:
    """Entry name → (step the saved state is at) for entries with a usable saved state; raises
    ConfigError (before anything loads) for a state that must not be used. Every rank checks
    every rank's files, so all ranks agree."""
    from .resume import check_named_outputs

    found = {}
    if job.fresh_output:  # a folder of its own, made when the run starts: nothing in it to resume
        return found
    for entry in job.entries:
        if not job.single and entry.line is not None:
            check_named_outputs(job.output_dir, entry, job.prompts_file)
        key, settings = state_key(entry.spec, entry.spec.mesh.world_size)
        for rank in range(state_files(job)):
            saved = saved_state(job.output_dir, entry, rank, key, settings)
            if saved is not None:
                found[entry.name] = saved[1]
    return found


def generate_entry(job: Job, entry: Entry, ckpt, loaded, backend, flag, should_stop, progress=None, preview=None):
    """One entry through `generate` with the loaded components: from its saved loop state when
    it has one (resume), stopping when `should_stop()` says so. Returns (the generation, the
    step it resumed from or None). Stopped with a signal on any rank (`flag`): the state is
    saved and Preempted raised; stopped for another reason (a server's cancel): the generation
    comes back with its `state` set, nothing saved. Every job's entries and every server
    request run through here. `preview`: a server's progress preview (pipeline/preview.py)."""
    from ..pipeline import generate
    from ..pipeline.segmented import is_segmented

    spec = entry.spec
    start, resumed = None, None
    stem = rank_stem(state_dir(job.output_dir, entry.name), state_rank(backend))
    if state_dir(job.output_dir, entry.name).is_dir():
        start, meta = load_loop_state(stem)
        resumed = start.step
        log.info(
            "%s: resuming from step %d of %d (saved after %s)",
            entry.name,
            resumed,
            spec.sampling.steps,
            meta.get("signal", "a stop"),
        )
    if is_segmented(spec) and should_stop is not None:
        # Animate/S2V keep no state to resume from (pipeline/segmented.py): a server's DELETE
        # stops the video, a signal lets it finish first (every rank asks both votes alike)
        vote = should_stop

        def should_stop() -> bool:
            return vote() and not backend.any_rank(flag.raised)

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
    if gen.state is not None and backend.any_rank(flag.raised):  # stopped for a signal: save and go
        save_state(job, entry, gen.state, backend, flag)
        raise Preempted(
            stopped_message(
                flag,
                f"after step {gen.state.step} of {spec.sampling.steps} of {entry.name}; the loop "
                f"state is saved in {state_dir(job.output_dir, entry.name)}",
                job,
            )
        )
    return gen, resumed


def reload_experts(spec, backend, ckpt, loaded):
    """memory=swap frees the high-noise expert during a video (and a server's job may want other
    LoRAs): the experts loaded again (from the page cache) before the next one; the text side —
    the text encoder (a server's, still loaded; a job's, released after its texts were encoded)
    and the texts source — and the VAE stay as they were. Returns the new components."""
    fresh, _ = load(spec, backend, ckpt, keep=loaded)
    return fresh


def state_rank(backend) -> int:
    return 0 if backend.single_controller else backend.rank


def save_state(job: Job, entry: Entry, state, backend, flag, preempted: bool = True) -> None:
    """Every torch rank saves its shard; JAX gathers the global arrays (a collective on several
    hosts, so every controller takes part) and process 0 writes them. Then the ranks meet, so
    no rank exits (and no launcher requeues) before every file is on disk. `preempted`: the
    launchers' marker is written too (a server's batch saving its members for a cancel: not)."""
    key, settings = state_key(entry.spec, entry.spec.mesh.world_size)
    meta = {
        "entry": entry.name,
        "line": entry.line,
        "state_key": key,
        "settings": settings,
        "steps": entry.spec.sampling.steps,
        "signal": flag.name if preempted else "its batch parted (a DELETE of another job in it)",
        "saved_at": time.time(),
    }
    host = state.map(lambda a: a if isinstance(a, np.ndarray) else backend.to_host(a))
    if not backend.single_controller or backend.writes_outputs:
        save_loop_state(rank_stem(state_dir(job.output_dir, entry.name), state_rank(backend)), host, meta)
    backend.any_rank(False)  # a barrier
    if preempted and backend.writes_outputs:
        write_marker(
            {
                "entry": entry.name,
                "step": state.step,
                "steps": entry.spec.sampling.steps,
                "signal": flag.name,
                "output_dir": job.output_dir,
                "exit_code": PREEMPTED_EXIT,
            }
        )


def stopped_message(flag, where: str, job: Job, saved: bool = True) -> str:
    """Where to resume from. A run without output_dir= made a folder of its own, and the same
    command would make another and start over: name the folder to pass back."""
    if job.fresh_output and saved:
        how = f"run it again with output_dir={job.output_dir} to resume"
    elif job.fresh_output:
        how = "run the same command again to start it"
    else:
        how = "run the same command again to resume"
    return f"preempted ({flag.name}): stopped {where}; {how} (exit code {PREEMPTED_EXIT})"
