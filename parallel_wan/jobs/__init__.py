"""Jobs: many generations per command (prompt files), re-runs that resume, preemption that
saves and exits 75, SLURM array shares. See README "Prompt files, resume and preemption".
runner.py runs a command's job; one_entry.py one entry of it (what the server runs too)."""

from .job import Entry, Job, build_job, prompts_setting
from .keys import result_key
from .one_entry import check_saved_states, generate_entry
from .preemption import PREEMPTED_EXIT, Preempted
from .runner import JobReport, run_job

__all__ = [
    "Entry",
    "Job",
    "JobReport",
    "PREEMPTED_EXIT",
    "Preempted",
    "check_saved_states",
    "build_job",
    "generate_entry",
    "prompts_setting",
    "result_key",
    "run_job",
]
