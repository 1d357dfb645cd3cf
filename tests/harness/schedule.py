"""The order the test modules are handed to pytest-xdist's workers: longest first.

`-n 2 --dist loadfile` gives each worker a module at a time, in collection order, the next one
to whichever worker finishes first. Handed out longest first (LPT scheduling), the last
modules are short and the two workers end close together; in pytest's own order a 3-minute
module collected last leaves one core idle for minutes. The seconds come from a measured run
(`module_seconds.json`, written by `python -m harness.schedule LOG` from the output of
`pytest --durations=0`): a stale or missing entry costs balance, never correctness (a module
it does not know counts as 0 s and runs last, in collection order).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter

SECONDS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_seconds.json")
_DURATION = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+?\.py)::")


def module_seconds(path: str = SECONDS_FILE) -> dict[str, float]:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def longest_first(items, seconds: dict[str, float]) -> None:
    """Sort `items` (pytest's) by their module's measured seconds, longest first; a module's
    tests keep their order (the sort is stable and the key is the module's)."""

    def key(item):
        module = item.nodeid.split("::", 1)[0]
        return -seconds.get(module, 0.0)

    items.sort(key=key)


def seconds_from_log(text: str) -> dict[str, float]:
    """Per-module totals of a `--durations=0` report (setup, call and teardown)."""
    totals: Counter = Counter()
    for line in text.splitlines():
        match = _DURATION.match(line)
        if match:
            totals[match.group(2)] += float(match.group(1))
    return {module: round(s, 1) for module, s in totals.most_common()}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        found = seconds_from_log(f.read())
    if not found:
        sys.exit(f"{sys.argv[1]}: no durations found (run pytest with --durations=0)")
    with open(SECONDS_FILE, "w") as f:
        json.dump(found, f, indent=1)
        f.write("\n")
    print(f"{SECONDS_FILE}: {len(found)} modules, {sum(found.values()):.0f} s")
