"""How a rank started by `parallel-wan --nproc N` tells the script why it stopped.

The script (launch/nproc.py) names a folder in $PARALLEL_WAN_RANK_EXITS. A rank that stops with
one of our exit codes (2 a bad setting, 1 a failure, 75 preempted, 130 Ctrl-C) writes that code
and its one line there, with the time, just before it exits, and leaves the line to the script:
the script prints the first rank's line once and exits with its code. Torchrun alone sees only
exit statuses, and then ends every other rank — possibly before rank 0 has printed the line it
was about to print. Under any other launcher the variable is unset and each rank prints its own
line, as it always has."""

from __future__ import annotations

import json
import os
import time

from ..report.outputs import write_json

ENV = "PARALLEL_WAN_RANK_EXITS"


def leave(code: int, line: str, env=os.environ) -> bool:
    """Record this process's exit `code` and `line` for the script; True when the script will
    print the line (the caller then must not)."""
    folder = env.get(ENV)
    if not folder:
        return False
    path = os.path.join(folder, f"{os.getpid()}.json")
    try:  # atomically: the script never reads half a record
        write_json(path, {"code": code, "line": line, "time": time.time()}, indent=None)
    except OSError:
        return False  # the folder is gone: say it here rather than not at all
    return True


def read(folder: str) -> list[dict]:
    """Every record in `folder`, the earliest first."""
    records = []
    for name in os.listdir(folder):
        if name.endswith(".json") and not name.startswith("."):  # not a record being written
            with open(os.path.join(folder, name)) as f:
                records.append(json.load(f))
    return sorted(records, key=lambda r: r["time"])
