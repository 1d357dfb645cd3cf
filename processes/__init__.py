"""The processes the tests and the benchmarks start, written once for both:

gloo_ranks.py  one function on N CPU processes joined by gloo (`spawn_ranks`), and a pool whose
               ranks stay alive between calls (`RankPool`: the tests' rank processes)
servers.py     servers (`python -m parallel_wan.serve`) as users start them, and a client that
               waits for /health, a job's status, a log line

A package at the repository's top, beside `benchmarks/` and `tests/`, not under either: the
benchmarks run as `python -m benchmarks.X` from the checkout, where `tests/` is not on the import
path (only pytest puts it there: pyproject.toml), and `parallel_wan/` is the product the wheel
ships, which holds no test machinery. Both import it from the checkout's root; the wheel does
not carry it (setup.py packages parallel_wan only).
"""
