"""The start-up every entry point that runs the model keeps, on every rank, in torchtitan's
order: join the job (backends/process.py: who this process is, the world the mesh must use) →
the entry's own check against that world (a bad setting: one line, exit 2, rank 0 says it —
before any process group exists, so nobody waits on anybody) → the choices auto made, logged →
the world started and the backend built (backends/__init__.py make_backend) → the entry's work →
a clean shutdown. A failure after the check ends the process as `endings.fail` says (exit 1,
75, 130; a multi-rank traceback tagged by rank). run.py and serve/server.py start this way."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ..config import ConfigError, backend_name
from .endings import fail, refuse
from .logs import log_choices, setup_logging

log = logging.getLogger("parallel_wan")
T = TypeVar("T")


class Started:
    """This process in its job (`process`: backends.process.JobProcess), as an entry point uses it."""

    def __init__(self, process, why: str | None):
        self.process, self.why = process, why

    @property
    def rank(self) -> int:
        return self.process.rank

    def check(self, checks: Callable[..., T]) -> T:
        """`checks(process)`'s answer; its ConfigError refused: one line (rank 0), exit 2."""
        try:
            return checks(self.process)
        except ConfigError as exc:
            refuse(exc, self.process.rank == 0)

    def say_choices(self, spec) -> None:
        """What backend=auto and mesh=auto chose for `spec`, and how the job joined (JAX on hosts)."""
        log_choices(self.why, spec)
        if self.process.note:
            log.info(self.process.note)

    def backend(self, spec):
        """Start the world and build the backend `spec` names (backends/__init__.py make_backend)."""
        from ..backends import make_backend

        return make_backend(spec, self.process.launch)


@contextmanager
def started_process(raw: dict, why: str | None = None) -> Iterator[Started]:
    """Join the job of composed settings `raw` (`why`: backend=auto's reason), set the logger
    up, and hand the entry its `Started`; the entry checks (`Started.check`), logs the choices,
    builds the backend and works inside. Any exception from inside ends the process through
    `fail`; a normal end shuts the process group down."""
    from ..backends.process import join_job

    try:
        process = join_job(backend_name(raw), str(raw.get("device") or "auto"))
    except ConfigError as exc:  # launcher variables that cannot be read
        refuse(exc, True)
    setup_logging(process.rank, bool(raw.get("log_all_ranks")))
    try:
        yield Started(process, why)
    except BaseException as exc:
        fail(exc, process.rank, process.count)
    process.shutdown()
