"""What every entry point shares (`python -m parallel_wan.run | .serve | .plan | .doctor |
.quantize`; cli.py reads their flags first):

endings.py     how one ends: a refusal (one line, exit 2), a failure after the start (exit 1, 75
               after a preemption, 130 on Ctrl-C, a multi-rank traceback tagged by rank)
logs.py        the package logger (rank 0 speaks) and the line saying what auto chose
backend_choice.py  backend=auto decided once, into the composed settings
started.py     the started process: join the job, the entry's check, the backend built, the
               clean shutdown — in that order, every rank
entry_check.py the check every generation passes before anything loads — a prompt file's
               entries, the command line's one, each server request

Cheap to import (no torch, no jax): the server's HTTP process and the planner use it.
"""

from .backend_choice import choose_backend
from .endings import fail, refusal, refuse
from .entry_check import check_entry
from .logs import log_choices, setup_logging
from .started import Started, started_process

__all__ = [
    "Started",
    "check_entry",
    "choose_backend",
    "fail",
    "log_choices",
    "refusal",
    "refuse",
    "setup_logging",
    "started_process",
]
