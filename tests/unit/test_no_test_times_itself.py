"""No test depends on the machine's speed (tests/README.md, "Acting on a running job"): none gives
a run enough steps to still be running when it acts (a test that acts on a running job holds it:
harness/hold.py), every sleep polls for something observable (it sits in a `while` loop), and no
assertion reads a clock."""

import ast
import functools
import re
from pathlib import Path

from harness.paths import REPO

ROOT = Path(REPO) / "tests"
TESTS = sorted(ROOT.rglob("*.py"))
# harness/phases.py: a phase of the GPU acceptance runner that hangs on purpose (it is killed).
SLEEPS_ON_PURPOSE = {"harness/phases.py"}
MOST_STEPS = 64  # the tiny model's runs here need a few; more was a timer
STEPS = re.compile(r"""\b(?:steps|num_inference_steps)(?:=|["']\s*:\s*)(\d+)""")  # steps=N, "steps": N
CLOCKS = {"monotonic", "perf_counter", "process_time", "elapsed"}


def _name(path) -> str:
    return path.relative_to(ROOT).as_posix()


@functools.cache
def _trees() -> list:
    return [
        (_name(path), ast.parse(path.read_text(), filename=str(path)))
        for path in TESTS
        if "fakegpu" not in path.parts  # the fake CUDA runtime's own event timing is not a test's
    ]


def test_no_run_gets_enough_steps_to_serve_as_a_timer():
    big = [
        (_name(path), int(n))
        for path in TESTS
        if path.name != "test_no_test_times_itself.py"
        for n in STEPS.findall(path.read_text())
        if int(n) > MOST_STEPS
    ]
    assert big == [], f"hold the run at a step instead (harness/hold.py): {big}"


def test_every_sleep_polls_inside_a_loop():
    bare = []
    for name, tree in _trees():
        looped = {id(n) for loop in ast.walk(tree) if isinstance(loop, ast.While) for n in ast.walk(loop)}
        for node in ast.walk(tree):
            called = node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
            if called == "sleep" and id(node) not in looped and name not in SLEEPS_ON_PURPOSE:
                bare.append(f"{name}:{node.lineno}")
    assert bare == [], f"wait for an observable state instead of sleeping: {bare}"


def test_no_assertion_reads_a_clock():
    timed = []
    for name, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                words = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
                words |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                if words & CLOCKS:
                    timed.append(f"{name}:{node.lineno}")
    assert timed == [], f"assert counts or states, not seconds: {timed}"
