"""The package logger as every entry point sets it up (rank 0 speaks; log_all_ranks=true: every
rank), and the line that says what `auto` chose."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("parallel_wan")


def setup_logging(rank: int = 0, all_ranks: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s %(levelname)s] %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO if rank == 0 or all_ranks else logging.WARNING)


def log_choices(why: str | None, spec) -> None:
    """backend=auto's and mesh=auto's choices, once the settings passed (`why`: the backend
    choice's reason, None when the backend was named)."""
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
