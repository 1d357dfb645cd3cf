"""One command for a lent GPU: is the code correct on it, how fast is it, written down.

    python -m benchmarks.gpu_acceptance --out DIR                # ≤ 20 minutes on one H100/H200
    python -m benchmarks.gpu_acceptance --out DIR --dry-run      # the same phases on CPU, tiny

Nothing is downloaded: random weights, the built-in tiny models. Every phase has its own
budget and runs in a child process killed when it is spent (runner.py); DIR/acceptance.json
is rewritten after every phase, so a run cut off keeps what it measured. At the end,
DIR/BENCHMARKS_rows.md holds the rows to paste into BENCHMARKS.md (device, date, command).
"""
