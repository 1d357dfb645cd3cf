"""The acceptance command's rows name the GPU even when a later run into another folder did not
repeat the environment phase (seen on the first H200 run: its step phases were rerun alone and
the rows called it a CPU dry run)."""

from benchmarks.gpu_acceptance.written import link_for, rows, step_device

STEP = {"status": "ok", "step": {"device": "NVIDIA H200 (sm_90, 140 GiB), CUDA 13.0", "torch": "2.11.0+cu130"}}


def test_rows_name_the_gpu_from_a_step_phase_without_the_environment():
    doc = {"dry_run": False, "device": "cuda", "phases": {"step_cp8": STEP}}
    assert step_device(doc["phases"]) == "NVIDIA H200 (sm_90, 140 GiB), CUDA 13.0, torch 2.11.0+cu130"
    first = rows(doc, "python -m benchmarks.gpu_acceptance --phases step_cp8", "2026-11-26").splitlines()[0]
    assert first.startswith("Device: NVIDIA H200 (sm_90") and "dry run" not in first
    assert link_for(step_device(doc["phases"]))[0] == "h200-nvlink"


def test_a_dry_run_is_called_one_and_a_bare_gpu_run_says_what_is_missing():
    dry = rows({"dry_run": True, "device": "cpu", "phases": {}}, "cmd", "2026-11-26")
    assert dry.startswith("Device: CPU dry run")
    bare = rows({"dry_run": False, "device": "cuda", "phases": {}}, "cmd", "2026-11-26")
    assert bare.startswith("Device: cuda (the environment phase did not run)")
    assert step_device({}) is None
