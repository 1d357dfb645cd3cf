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

from .config import ConfigError, RunSpec
from .config.compose import CONF_DIR, compose_settings  # noqa: F401 (CONF_DIR: API, the tests import it from here)
from .entry import check_entry, choose_backend, refuse, started_process

log = logging.getLogger("parallel_wan")


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

    first = {}

    def check(spec):
        first["ckpt"] = check_entry(spec, first.get("ckpt"))  # the first entry describes the checkpoint
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


def start(raw: dict, why: str | None = None) -> None:
    """Join the job, check every setting against it, then run the job (entry/started.py)."""
    from .jobs import run_job

    with started_process(raw, why) as started:
        job, ckpt = started.check(lambda p: validate_job(raw, p.world, p.node_size, p.local_rank))
        started.say_choices(job.base)
        if started.rank == 0 and job.entries:
            _announce_duration(job, ckpt)
        run_job(job, ckpt, backend=started.backend(job.base))


def _announce_duration(job, ckpt) -> None:
    """A job far longer than a quick run says so before anything loads: its FLOPs over this
    device's measured speed (memory_plan/compute_time.py; measured only for a long job)."""
    from .memory_plan.compute_time import job_estimate
    from .memory_plan.fits import architecture_of

    tcfg, vcfg = architecture_of(job.base, ckpt)
    said = job_estimate([entry.spec for entry in job.entries], tcfg, vcfg)
    if said is not None:
        (log.warning if said[1] else log.info)(said[0])


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
        refuse(exc)
    start(raw, why)


if __name__ == "__main__":
    main()
