"""README's attention tables ("Attention kernels"), written from the registered kernels
(kernels/), so the page says what the code does: tests/unit/test_readme.py checks that README
holds them as `auto_table()` and `kernel_table()` print them, and
`python -m parallel_wan.backends.torch.attention_table README.md` rewrites them after a kernel
is added or changed. No torch."""

from __future__ import annotations

from . import kernels as registry
from .kernels import GENERATION_GPUS, GENERATIONS, Kernel

DEVICES = {"cpu": "CPU", **{gen: f"{name} ({GENERATION_GPUS[gen]})" for gen, name in GENERATIONS.items()}}
WHERE = {"cpu": "CPU", **GENERATIONS, "other": "other devices"}


def auto_table() -> str:
    """What attention_impl=auto tries, in order, per device."""
    lines = ["| device | `auto` tries, in order |", "|---|---|"]
    for gen, device in DEVICES.items():
        found = sorted((k for k in registry.kernels() if k.exact and gen in k.priority), key=lambda k: k.priority[gen])
        lines.append(f"| {device} | {', '.join(_named(k) for k in found)} |")
    return "\n".join(lines)


def kernel_table() -> str:
    """Every registered kernel: its setting, what it takes, where it runs."""
    lines = [
        "| kernel | `attention_impl=` | what it is | `auto` tries it on | the setting runs it on | dtypes | head_dim |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in sorted(registry.kernels(), key=lambda k: (registry.settings().index(k.setting), k.name)):
        auto = ", ".join(WHERE[g] for g in WHERE if g in k.priority) if k.exact else "never (lossy)"
        dtypes = "any" if k.dtypes is None else ", ".join(k.dtypes)
        lines.append(f"| `{k.name}` | {k.setting} | {k.summary} | {auto} | {_runs_on(k)} | {dtypes} | {k.head_dims} |")
    return "\n".join(lines)


def _named(kernel: Kernel) -> str:
    return f"`{kernel.name}`" + (f" (when {kernel.package_label} is installed)" if kernel.packages else "")


def _runs_on(kernel: Kernel) -> str:
    parts = []
    if "cpu" in kernel.devices:
        parts.append("CPU")
    if "cuda" in kernel.devices:
        gens = [GENERATIONS[g] for g in GENERATIONS if g in kernel.priority]
        gpus = "CUDA " + ("/".join(gens) if len(gens) < len(GENERATIONS) else "GPUs")
        if kernel.min_capability is not None:
            gpus += f", sm_{kernel.min_capability[0]}{kernel.min_capability[1]}+"
        parts.append(gpus)
    if kernel.interpreted is not None:
        parts.append(f"CPU under Triton's interpreter (tests; head_dim {kernel.interpreted})")
    if kernel.packages:
        parts.append(f"needs {kernel.package_label}")
    return "; ".join(parts)


def rewrite(text: str) -> str:
    """`text` (README) with its two tables replaced by the registry's: each table is the lines
    from its header row to the next blank line."""
    for table in (kernel_table(), auto_table()):
        header = table.split("\n", 1)[0]
        start = text.index(header)
        end = text.find("\n\n", start)
        text = text[:start] + table + (text[end:] if end >= 0 else "\n")
    return text


if __name__ == "__main__":  # python -m parallel_wan.backends.torch.attention_table README.md: rewrite them
    import sys

    for path in sys.argv[1:]:
        with open(path) as f:
            before = f.read()
        after = rewrite(before)
        if after != before:
            with open(path, "w") as f:
                f.write(after)
        print(f"{path}: {'rewritten' if after != before else 'already current'}")
