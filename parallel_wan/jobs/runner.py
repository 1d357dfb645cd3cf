"""Running a job: the model loads once, the entries run in order, each is written as soon as it
is done; a re-run skips what is finished and resumes what was interrupted; SIGTERM/SIGUSR1
stops every rank after the same step, saves the loop state and exits 75 (preemption.py).

Every rank walks the same list (the decisions read files on the shared output folder and
votes taken over the ranks), so no rank waits in a collective another rank skipped. One entry's
run — resume, generate, save on a signal — is one_entry.py's, which the server runs too.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ..pipeline.checkpoint import load
from .job import Entry, Job, with_output_dir
from .keys import result_settings
from .one_entry import generate_entry, reload_experts, stopped_message
from .output_folder import claim_folder, release_if_empty
from .preemption import PREEMPTED_EXIT, Preempted, PreemptionFlag, write_marker
from .resume import drop_state, finished, state_dir
from .single_outputs import check_single_outputs, earlier_files, remove_earlier
from .texts import encode_job_texts

log = logging.getLogger("parallel_wan")


@dataclass
class JobReport:
    made: list = field(default_factory=list)  # names written this run
    skipped: list = field(default_factory=list)  # finished before this run
    resumed: dict = field(default_factory=dict)  # name → step resumed from
    timings: dict = field(default_factory=dict)  # phase → seconds, summed over entries
    paths: dict | None = None  # the single run's paths (run.run's return value)


def run_job(job: Job, ckpt=None, launch=None, backend=None) -> JobReport:
    from ..backends import make_backend
    from .entry_outputs import log_run

    backend = backend or make_backend(job.base, launch)
    output_dir = job.output_dir
    if job.fresh_output and backend.writes_outputs:
        output_dir = claim_folder(output_dir)  # never another run's folder (output_folder.py)
    output_dir = backend.same_on_every_rank(output_dir)  # the writer's; a default may differ by a second between ranks
    if output_dir != job.output_dir:
        job = with_output_dir(job, output_dir)
    log_run(job.base, backend)
    flag = PreemptionFlag().install()
    try:
        return _run(job, ckpt, backend, flag)
    except BaseException:
        if job.fresh_output and backend.writes_outputs:
            release_if_empty(job.output_dir)
        raise
    finally:
        flag.uninstall()


def _run(job: Job, ckpt, backend, flag: PreemptionFlag) -> JobReport:
    report, started = JobReport(), time.perf_counter()
    if not job.entries:
        log.info("array task %d of %d: no entries (the file has %d); nothing to do", *job.share, job.total)
        return report
    todo = _todo(job, report)
    if not todo and not job.single:
        log.info(
            "job complete: %s in %s %s done; nothing to do",
            "the 1 entry" if len(job.entries) == 1 else f"all {len(job.entries)} entries",
            job.output_dir,
            "is" if len(job.entries) == 1 else "are",
        )
        _summary(job, report, time.perf_counter() - started, backend)
        return report

    def should_stop() -> bool:
        return backend.any_rank(flag.raised)

    with tempfile.TemporaryDirectory(prefix="parallel_wan_tiny_") as tiny_dir, backend.inference_mode():
        # Load once, then generate every entry (a single run is a job of one entry).
        t0 = time.perf_counter()
        loaded, ckpt = load(job.base, backend, ckpt, tiny_dir)
        report.timings["load"] = time.perf_counter() - t0
        if not job.single:  # every entry's texts encoded once up front; the encoder is freed
            log.info("one load for %d %s", len(todo), _entries_word(job))
            t0 = time.perf_counter()
            loaded.texts = encode_job_texts([e.spec for e in todo], loaded, backend)
            report.timings["text"] = time.perf_counter() - t0
        for number, entry in enumerate(todo, start=1):
            if should_stop():  # a signal while loading or writing: stop before the next entry
                if backend.writes_outputs:
                    write_marker(
                        {
                            "entry": entry.name,
                            "step": 0,
                            "steps": entry.spec.sampling.steps,
                            "signal": flag.name,
                            "output_dir": job.output_dir,
                            "exit_code": PREEMPTED_EXIT,
                        }
                    )
                raise Preempted(stopped_message(flag, f"before {entry.name} (nothing to save)", job, saved=False))
            if number > 1 and job.base.memory.mode == "swap":
                t0 = time.perf_counter()
                loaded = reload_experts(job.base, backend, ckpt, loaded)
                report.timings["load"] = report.timings.get("load", 0.0) + time.perf_counter() - t0
            _one(job, entry, number, len(todo), ckpt, loaded, backend, flag, should_stop, report)
    _summary(job, report, time.perf_counter() - started, backend)
    return report


def _todo(job: Job, report: JobReport) -> list:
    if job.single:
        entry = job.entries[0]
        if not job.fresh_output and check_single_outputs(job.output_dir, entry):
            report.skipped.append(entry.name)
            log.info(
                "%s.mp4 in output_dir=%s was made before with these settings (checksum verified): nothing to do; "
                "set another output_dir, or delete %s.mp4 and %s.json there, to make it again",
                entry.name,
                job.output_dir,
                entry.name,
                entry.name,
            )
            return []
        return list(job.entries)
    todo = []
    for entry in job.entries:
        done, why = finished(job.output_dir, entry)
        if done:
            report.skipped.append(entry.name)
            continue
        if why != "not made yet" and not state_dir(job.output_dir, entry.name).is_dir():
            log.info("%s: making it again (%s)", entry.name, why)
        todo.append(entry)
    share = (
        f" (array task {job.share[0]} of {job.share[1]}: {len(job.entries)} of {job.total} entries)"
        if job.share
        else ""
    )
    log.info(
        "job: %d %s from %s%s; %d done before, %d to make; outputs in %s",
        len(job.entries),
        _entries_word(job),
        job.prompts_file,
        share,
        len(report.skipped),
        len(todo),
        job.output_dir,
    )
    if report.skipped:
        log.info("skipped (finished, checksums verified): %s", _names(report.skipped))
    return todo


def _one(
    job: Job, entry: Entry, number: int, count: int, ckpt, loaded, backend, flag, should_stop, report: JobReport
) -> None:
    from .entry_outputs import progress_bar

    t0 = time.perf_counter()
    show = backend.writes_outputs and not entry.spec.execution.scan_loop
    gen, resumed = generate_entry(
        job, entry, ckpt, loaded, backend, flag, should_stop, progress_bar(entry.spec.sampling.steps, enabled=show)
    )
    if job.single:  # its sidecar and TIMING SUMMARY count the load, which the job did before generate
        load_s = round(report.timings["load"], 4)
        gen.timings = {"load": load_s, **gen.timings, "total": round(gen.timings["total"] + load_s, 4)}
    for phase, seconds in gen.timings.items():
        if phase in ("total", "text", "load"):  # the job times its own total, load and up-front texts
            continue
        report.timings[phase] = report.timings.get(phase, 0.0) + seconds
    if resumed is not None:
        report.resumed[entry.name] = resumed
    if backend.writes_outputs:
        report.paths = _write(job, entry, gen, resumed)
        drop_state(job.output_dir, entry.name)
    report.made.append(entry.name)
    if not job.single:
        log.info(
            "[%d/%d] %s.mp4 written (line %d, %.1f s%s)",
            number,
            count,
            entry.name,
            entry.line,
            time.perf_counter() - t0,
            f", resumed from step {resumed}" if resumed is not None else "",
        )


def _write(job: Job, entry: Entry, gen, resumed: int | None) -> dict:
    from .entry_outputs import gen_summary, write_generation

    extra = {}
    if resumed is not None:
        extra["resumed_from_step"] = resumed
    # what the video is, so a later run into this folder knows whether it is the same one
    extra["job"] = {"result_key": entry.key, "settings": result_settings(entry.spec)}
    if not job.single:
        extra["job"] = {
            "prompts_file": job.prompts_file,
            "line": entry.line,
            "name": entry.name,
            **extra["job"],
            "share": list(job.share) if job.share else None,
        }
    earlier = earlier_files(job.output_dir, entry.name)
    paths = write_generation(entry.spec, gen, extra, stem=entry.name)
    remove_earlier(job.output_dir, entry.name, earlier)  # an unfinished earlier run's files: not beside ours
    if job.single:
        print(gen_summary(gen, paths), file=sys.stderr)
    return paths


def _summary(job: Job, report: JobReport, seconds: float, backend) -> None:
    if job.single or not backend.writes_outputs:
        return
    from ..report.timing import timing_summary

    made = len(report.made)
    extra = {
        "entries": f"{made} made, {len(report.skipped)} skipped (done before), {len(report.resumed)} resumed "
        f"of {len(job.entries)}" + (f" (array task {job.share[0]} of {job.share[1]})" if job.share else ""),
        "outputs": job.output_dir,
    }
    if made:
        extra["per video"] = f"{(seconds - report.timings.get('load', 0.0)) / made:.1f} s after loading"
    print(timing_summary(report.timings, seconds, extra), file=sys.stderr)
    _write_job_record(job, report, time.time() - seconds)


def _write_job_record(job: Job, report: JobReport, started: float) -> None:
    """OUTPUT_DIR/job.json (job-<i>-of-<n>.json for an array task): what this run made, skipped
    and resumed (top level), and under "runs" every run's record, oldest first — a re-run that
    only skips must not erase what the first run made."""
    import json

    from .. import __version__
    from ..report.outputs import write_json

    name = "job.json" if job.share is None else f"job-{job.share[0]}-of-{job.share[1]}.json"
    path = os.path.join(job.output_dir, name)
    run = {
        "started": _iso(started),
        "finished": _iso(time.time()),
        "parallel_wan": __version__,
        "made": report.made,
        "skipped": report.skipped,
        "resumed_from_step": report.resumed,
        "timings_s": report.timings,
    }
    try:
        with open(path) as f:
            runs = json.load(f).get("runs", [])
        runs = runs if isinstance(runs, list) else []
    except (OSError, ValueError, AttributeError):
        runs = []  # the first run, or a damaged record: start the history again
    write_json(
        path,
        {
            "prompts_file": job.prompts_file,
            "entries": [e.name for e in job.entries],
            **{k: v for k, v in run.items() if k not in ("started", "finished", "parallel_wan")},
            "runs": [*runs, run],
        },
    )


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def _entries_word(job: Job) -> str:
    return "entry" if len(job.entries) == 1 else "entries"


def _names(names: list, limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


__all__ = ["JobReport", "run_job"]
