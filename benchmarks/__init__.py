"""Measurements behind BENCHMARKS.md: each module is runnable with `python -m benchmarks.NAME`
from the repository root and prints the table it produces, with the command that made it."""
