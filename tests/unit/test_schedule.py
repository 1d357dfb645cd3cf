"""harness/schedule.py: the modules go to the xdist workers longest first, each module's tests in order."""

import os
from types import SimpleNamespace

from harness.paths import REPO
from harness.schedule import longest_first, module_seconds, seconds_from_log

LOG = """
============================= slowest durations ==============================
12.50s call     tests/a/test_x.py::test_one[p]
3.00s setup    tests/a/test_x.py::test_one[p]
7.20s call     tests/b/test_y.py::test_two
0.40s teardown tests/b/test_y.py::test_two
1 passed in 3.1s
"""


def test_seconds_from_a_durations_report_add_up_per_module():
    assert seconds_from_log(LOG) == {"tests/a/test_x.py": 15.5, "tests/b/test_y.py": 7.6}


def test_longest_module_first_and_each_modules_tests_in_their_order():
    items = [
        SimpleNamespace(nodeid=n)
        for n in ("tests/s.py::t1", "tests/l.py::t1", "tests/u.py::t1", "tests/s.py::t2", "tests/l.py::t2")
    ]
    longest_first(items, {"tests/s.py": 1.0, "tests/l.py": 9.0})
    assert [i.nodeid for i in items] == [
        "tests/l.py::t1",
        "tests/l.py::t2",
        "tests/s.py::t1",
        "tests/s.py::t2",
        "tests/u.py::t1",
    ]


def test_every_module_the_seconds_file_names_exists():
    """A renamed or removed module left in the file would silently lose its place in the order."""
    missing = [m for m in module_seconds() if not os.path.exists(os.path.join(REPO, m))]
    assert module_seconds() and not missing, (
        f"tests/module_seconds.json names {missing}: rerun python -m harness.schedule"
    )
