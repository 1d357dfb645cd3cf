"""SLURM job arrays spread one prompt file: `sbatch --array=0-7 … prompts=FILE` starts 8 array
tasks (each a full, possibly multi-node job); task i takes the i-th contiguous slice of the
entries. Read from SLURM_ARRAY_TASK_ID / _COUNT / _MIN; outside an array every entry is ours."""

from __future__ import annotations

from ..config import ConfigError


def array_share(env) -> tuple[int, int] | None:
    """(index, count) of this array task, or None outside a job array."""
    if "SLURM_ARRAY_TASK_ID" not in env:
        return None
    values = {}
    for key in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"):
        text = env.get(key, "0" if key == "SLURM_ARRAY_TASK_MIN" else "")
        try:
            values[key] = int(text)
        except ValueError:
            raise ConfigError(f"{key}={text!r} is not a whole number; run array jobs with sbatch --array=0-N") from None
    index = values["SLURM_ARRAY_TASK_ID"] - values["SLURM_ARRAY_TASK_MIN"]
    count = values["SLURM_ARRAY_TASK_COUNT"]
    if count < 1 or not 0 <= index < count:
        raise ConfigError(
            f"SLURM_ARRAY_TASK_ID={values['SLURM_ARRAY_TASK_ID']} is not one of {count} tasks starting at "
            f"SLURM_ARRAY_TASK_MIN={values['SLURM_ARRAY_TASK_MIN']}; use a contiguous range "
            "(sbatch --array=0-N, a step such as 0-7:2 is not supported)"
        )
    return index, count


def share_of(entries: list, share: tuple[int, int] | None) -> list:
    """Task i of n gets entries [i·len/n, (i+1)·len/n): contiguous, sizes differing by at most one."""
    if share is None:
        return list(entries)
    index, count = share
    return list(entries[index * len(entries) // count : (index + 1) * len(entries) // count])
