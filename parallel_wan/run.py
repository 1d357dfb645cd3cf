"""Entry point: `python -m parallel_wan.run [key=value ...]` (Hydra overrides, see conf/config.yaml).

Order matters for users: validate every setting and the checkpoint's json/headers first (one
line and exit code 2 on a bad value, nothing written, nothing compiled), then load, generate,
and write the mp4 and its JSON sidecar atomically, then print the TIMING SUMMARY.

backend=torch: one process per device (torchrun); rank 0 logs and writes.
backend=jax: one process per host drives every local device; several hosts join through
`jax.distributed` (backends/jax/multihost.py); process 0 logs and writes.
"""

from __future__ import annotations

import logging
import os
import sys

from .config import ConfigError, RunSpec, backend_name
from .config.compose import CONF_DIR, compose_settings, hydra_error_line  # noqa: F401 (API)
from .errors import RunError
from .jobs.generation import gen_summary, log_run, progress_bar, write_generation  # noqa: F401 (API)
from .launch.rank_exit import leave

log = logging.getLogger("parallel_wan")


def setup_logging(rank: int = 0, all_ranks: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s %(levelname)s] %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO if rank == 0 or all_ranks else logging.WARNING)


def run(spec: RunSpec, ckpt=None, launch=None) -> dict | None:
    """One generation (the command line's, without prompts=) and, on the process that writes,
    its outputs; returns the paths written (None elsewhere)."""
    from .jobs import Entry, Job, result_key, run_job

    job = Job((Entry("video", spec, result_key(spec)),), spec.output.dir)
    return run_job(job, ckpt, launch).paths


def validate_job(raw: dict, world_size: int, node_size: int | None = None, local_rank: int = 0, env=os.environ):
    """Every setting, the device, the checkpoint's json/headers and the video's size against the
    model and the device, for every entry of the job (prompts=FILE: each line; else the one
    run), and every saved state it would resume → (job, checkpoint description). Raises
    ConfigError naming the line; loads nothing, compiles nothing, writes nothing."""
    from .backends.process import check_device
    from .jobs import build_job, check_saved_states
    from .jobs.single_outputs import check_single_outputs
    from .memory_plan.fits import check_fits
    from .pipeline import preflight
    from .pipeline.checkpoint import check_compatible

    first = {}

    def check(spec):
        if not first:
            first["ckpt"] = preflight(spec)
        elif first["ckpt"] is None:
            preflight(spec)  # the built-in tiny model: nothing read
        else:
            check_compatible(spec, first["ckpt"])
        check_fits(spec, first["ckpt"])
        if not first.get("device"):
            # last: asking for the device imports torch (2 s); a bad setting or checkpoint has
            # been refused without it
            check_device(spec, local_rank, world_size)
            first["device"] = True

    job = build_job(raw, world_size, node_size, env, check)
    check_saved_states(job)
    if job.single and not job.fresh_output:  # output_dir= holding another run's video: refused
        check_single_outputs(job.output_dir, job.entries[0])
    return job, first.get("ckpt")


def choose_backend(raw: dict) -> str | None:
    """backend=auto → torch or jax (launch/backend_choice.py), written into `raw`; returns why
    (None when the backend was named)."""
    if backend_name(raw) != "auto":
        return None
    from .launch import detect
    from .launch.backend_choice import choose_backend as choose

    name, why = choose(detect())
    raw["backend"] = {**(raw.get("backend") or {}), "name": name}
    return why


def _log_choices(why: str | None, spec) -> None:
    if why is not None:
        log.info("backend=auto → %s (%s)", spec.execution.backend, why)
    if spec.mesh.name.startswith("auto:"):
        log.info(
            "mesh=auto → %s (dp=%d, ulysses=%d, ring=%d)",
            spec.mesh.name.removeprefix("auto:"),
            spec.mesh.dp,
            spec.mesh.ulysses,
            spec.mesh.ring,
        )


def _refuse(exc: ConfigError, speaks: bool) -> None:
    # Every process validates the same settings and stops here, before any process group
    # exists or anything compiles, so nobody waits on anybody; one process says why (under
    # `parallel-wan --nproc`, the script does: launch/rank_exit.py).
    line = f"parallel_wan: error: {exc}"
    if not leave(2, line) and speaks:
        print(line, file=sys.stderr)
    sys.exit(2)


def start(raw: dict, why: str | None = None) -> None:
    """Join the job (backends/process.py), check every setting against it, then run the job."""
    from .backends.process import join_job

    try:
        process = join_job(backend_name(raw), str(raw.get("device") or "auto"))
    except ConfigError as exc:  # launcher variables that cannot be read
        _refuse(exc, True)
    setup_logging(process.rank, bool(raw.get("log_all_ranks")))
    try:
        job, ckpt = validate_job(raw, process.world, process.node_size, process.local_rank)
    except ConfigError as exc:
        _refuse(exc, process.rank == 0)
    _log_choices(why, job.base)
    if process.note:
        log.info(process.note)
    if process.rank == 0 and job.entries:
        _announce_duration(job, ckpt)
    try:
        from .jobs import run_job

        run_job(job, ckpt, process.launch)
    except BaseException as exc:
        _fail(exc, process.rank, process.count)
    process.shutdown()


def _announce_duration(job, ckpt) -> None:
    """A job far longer than a quick run says so before anything loads: its FLOPs over this
    device's measured speed (memory_plan/compute_time.py; measured only for a long job)."""
    from .memory_plan.compute_time import job_estimate
    from .memory_plan.fits import architecture_of

    tcfg, vcfg = architecture_of(job.base, ckpt)
    said = job_estimate([entry.spec for entry in job.entries], tcfg, vcfg)
    if said is not None:
        (log.warning if said[1] else log.info)(said[0])


def _fail(exc: BaseException, rank: int, world: int) -> None:
    """How a started run ends when it cannot finish; nothing is half-written either way (outputs
    are staged and renamed only once all of them are written: report/outputs.py).

    Preempted (SIGTERM/SIGUSR1: jobs/preemption.py): the state is saved; exit 75, every rank.
    Ctrl-C: exit 130 (128 + SIGINT, the shell's code). A RunError (non-finite latents, outputs
    that could not be written): its one line, exit 1; weights holding NaN/inf (BadWeights): its
    one line, exit 2, like any bad input. Anything else on one process: Python's traceback. On several: the
    traceback, each line tagged with the rank, in this rank's log,
    then the one-line reason, and exit at once — a failing rank must end the job, not leave its
    peers blocked in a collective: their collectives then fail (peer gone) or time out after
    dist_timeout_s, and they exit through this same path."""
    import traceback

    if isinstance(exc, SystemExit):
        raise exc
    from .jobs import PREEMPTED_EXIT, Preempted

    tag = f" (rank {rank}/{world})" if world > 1 else ""
    if isinstance(exc, Preempted):
        code, line, speaks = PREEMPTED_EXIT, f"parallel_wan: {exc}", rank == 0
    elif isinstance(exc, KeyboardInterrupt):
        code, line, speaks = 130, f"parallel_wan: interrupted{tag}; nothing was written", rank == 0
    elif isinstance(exc, RunError):
        code, line, speaks = exc.exit_code, f"parallel_wan: error{tag}: {exc}", True
    elif world == 1:
        raise exc
    else:
        lines = "".join(traceback.format_exception(exc)).splitlines()
        print("\n".join(f"[rank {rank}/{world}] {line}" for line in lines), file=sys.stderr)
        code, line, speaks = 1, f"parallel_wan: rank {rank}/{world} failed: {type(exc).__name__}: {exc}", True
    # under `parallel-wan --nproc` the script prints the first rank's line (launch/rank_exit.py)
    if not leave(code, line) and speaks:
        print(line, file=sys.stderr, flush=True)
    if world > 1:
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """`python -m parallel_wan.run key=value …` (and the `parallel-wan` script): the flags first
    (cli.py: --help, --version, --nproc N, --cfg job), then the settings, composed once
    (config/compose.py: Hydra's own errors are one line and exit 2 like every other bad setting)."""
    from .cli import front

    overrides = front("run", sys.argv[1:] if argv is None else list(argv))
    try:
        raw = compose_settings(overrides)
        why = choose_backend(raw)
    except ConfigError as exc:
        _refuse(exc, True)
    start(raw, why)


if __name__ == "__main__":
    main()
