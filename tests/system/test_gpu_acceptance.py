"""benchmarks/gpu_acceptance, the one command for a lent GPU, without one: its runner kills a
phase that overruns its budget in a child process, keeps what that phase measured and goes on;
its dry run runs every phase's code path on the CPU (tiny model, tiny shapes) and writes the
JSON and the BENCHMARKS.md rows; bad flags are refused before anything runs. The dry run runs
its phases in this process (the child machinery is the first test's subject); nothing is timed."""

import itertools
import json

import pytest

from benchmarks.gpu_acceptance import __main__ as acceptance
from benchmarks.gpu_acceptance.correct import fp8_available, verdicts
from benchmarks.gpu_acceptance.runner import Step, run_phases

pytestmark = pytest.mark.system


@pytest.mark.slow  # over 5 s: the stuck phase's 10 s budget (tests/README.md)
def test_a_phase_over_its_budget_is_killed_and_the_next_one_runs(tmp_path):
    steps = [Step("stuck", "harness.phases:hangs", 10), Step("after", "harness.phases:finishes", 10)]
    doc = run_phases(steps, tmp_path, dry_run=True, device="cpu", budget_s=20, children={"stuck"})
    stuck, after = doc["phases"]["stuck"], doc["phases"]["after"]
    assert stuck["status"] == "timed out" and "killed after its budget" in stuck["error"]
    assert stuck["measured_before_hanging"] == 42  # what it wrote before hanging is kept
    assert after["status"] == "ok" and after["ran"] is True
    assert json.loads((tmp_path / "acceptance.json").read_text()) == doc  # on disk after each phase


def test_a_run_out_of_budget_records_the_phases_it_skipped(tmp_path):
    # the run starts at 0, the first phase's budget is read and it starts at 0; every later
    # reading is 5 s: it ended with the run's whole budget spent
    ticks = itertools.chain([0.0, 0.0, 0.0], itertools.repeat(5.0))
    doc = run_phases(
        [Step("first", "harness.phases:finishes", 5), Step("second", "harness.phases:finishes", 5)],
        tmp_path,
        dry_run=True,
        device="cpu",
        budget_s=5,
        children=(),
        clock=lambda: next(ticks),
    )
    assert doc["phases"]["first"]["status"] == "ok"
    assert doc["phases"]["second"]["status"] == "skipped"


@pytest.mark.slow  # ≈ 30 s on the 2-core machine (tests/README.md)
def test_dry_run_runs_every_phase_and_writes_the_rows(tmp_path):
    doc = acceptance.main(["--out", str(tmp_path), "--dry-run"], children=())
    phases = doc["phases"]
    assert list(phases) == [s.name for s in acceptance.STEPS]
    assert {n: p["status"] for n, p in phases.items()} == dict.fromkeys(phases, "ok"), {
        n: p.get("error") for n, p in phases.items()
    }
    # every correctness check held (cpu vs cpu: identical; bf16 within test_hot_path's bound)
    assert not [bad for n in ("videos", "kernels", "compiled", "fp8") for bad in verdicts(phases[n])]
    assert set(phases["videos"]) >= {"t2v", "i2v", "ti2v"}
    assert all(phases["videos"][t]["fp32_vs_cpu"]["frames_max_levels"] == 0 for t in ("t2v", "i2v", "ti2v"))
    kernels = phases["kernels"]["kernels"]
    assert kernels["cpu_flash"]["runs"] and kernels["math"]["runs"]
    if fp8_available():  # quant_compute landed: the FP8 video was compared (its bound held above)
        assert phases["fp8"]["fp8_vs_bf16"]["ok"]
    else:
        assert phases["fp8"]["available"] is False and "not available in this checkout" in phases["fp8"]["note"]
    for mesh in ("ulysses8", "cp8", "dp2_cp4"):
        summary = phases[f"step_{mesh}"]["summary"]
        assert summary["best_diffusers"] == "diffusers native" and summary["host_syncs"] is None  # no CUDA
    for mesh in ("ulysses8", "cp8", "dp2_cp4"):  # the compiled run's timings joined the eager run's
        assert "ours compiled, fused q/k/v" in phases[f"step_{mesh}"]["summary"]["variants"]
    assert any("kernel cpu_flash" in v for v in phases["step_cp8"]["summary"]["variants"])
    assert set(phases["vae"]["bands"]) == {"1", "2"} and all(b["finite"] for b in phases["vae"]["bands"].values())
    assert phases["load"]["rates"]["read_gbps"] > 0
    lora = phases["load"]["lora"]  # load + placement with a LoRA merged on the device, on the host, none
    assert set(lora["seconds"]) == {"plain", "merged on the device", "merged on the host"} and lora["rank"] == 64
    assert all(s > 0 for s in lora["seconds"].values())
    speeds = {r["kernel"]: r for r in phases["attention"]["kernels"]["rows"]}
    assert speeds["cpu_flash"]["vs_reference"] == 1.0 and speeds["math"]["out_rel"] < 1e-5
    assert "error" in speeds["fp8"] and "error" in speeds["cuda_cudnn"]  # GPU kernels: refused on CPU, said why
    rows = phases["attention"]["sparse"]["rows"]  # the torch path on CPU; never denser at a smaller decay
    sparse = [r for r in rows if r["mask"] == "radial"]
    assert [r["decay_factor"] for r in sparse] == [0.8, 1.0, 0.6] and all(0 < r["block_density"] < 1 for r in rows)
    svg = [r for r in rows if r["mask"] == "svg"]  # its whole call: profile, placement, kernel
    assert [r["density"] for r in svg] == [0.3, 0.15] and svg[1]["block_density"] <= svg[0]["block_density"]
    assert all(0 <= r["temporal_head_fraction"] <= 1 and r["ms"] > 0 and r["path"].startswith("torch") for r in svg)
    assert sparse[2]["block_density"] <= sparse[0]["block_density"] <= sparse[1]["block_density"]
    assert all(r["out_rel_to_dense"] > 0 and r["ms"] > 0 and r["path"].startswith("torch") for r in sparse)
    ops = {r["op"]: r for r in phases["attention"]["elementwise"]["ops"]}
    assert set(ops) == {"norm_modulate", "gated_residual", "rms_norm_rope"}
    assert all(r["unfused_ms"] > 0 and "not run" in r["fused"] for r in ops.values())  # fused: CUDA only
    assert {"ulysses8", "cp8", "dp2_cp4"} <= set(phases["written"]["prediction"]["meshes"])
    # the whole-video table (tests/system/test_benchmarks_video.py checks its rows): within its budget
    video = phases["whole_video"]["video"]
    assert {r["recipe"] for r in video["rows"] if r["ran"]} >= {"lightning bf16", "dense 480p"}
    assert abs(video["budget_s"] - (phases["whole_video"]["budget_s"] - 20)) <= 1  # fast.VIDEO_MARGIN_S, whole s
    assert json.loads((tmp_path / "acceptance.json").read_text()) == json.loads(json.dumps(doc, default=str))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["BENCHMARKS_rows.md", "acceptance.json", "first_frame.png"]
    rows = (tmp_path / "BENCHMARKS_rows.md").read_text()
    assert "Dry run on CPU" in rows and "--dry-run" in rows
    assert sum(line.startswith("| CPU dry run |") for line in rows.splitlines()) == 3  # one row per mesh
    assert "Did not finish" not in rows
    assert "| cpu_flash | " in rows and "Attention kernels at 512 tokens" in rows
    assert "Whole videos (benchmarks/video.py" in rows and "| lightning bf16 (" in rows
    assert "| norm_modulate | " in rows and "TFLOP/s-equivalent" in rows
    assert "LoRA rank 64 on 1 Wan-shaped blocks (a CPU standing in for the device" in rows


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--phases", "nope"], ["--phases nope", "environment"]),
        (["--budget-min", "0"], ["--budget-min 0"]),
        ([], ["no CUDA device", "--dry-run"]),  # this machine has no GPU
    ],
)
def test_bad_flags_are_refused_before_anything_runs(tmp_path, capsys, argv, words):
    with pytest.raises(SystemExit) as exit_:
        acceptance.main(["--out", str(tmp_path / "out"), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and all(w in err for w in words)
    assert not (tmp_path / "out").exists()


def test_a_later_run_into_the_same_folder_keeps_the_phases_it_does_not_repeat(tmp_path):
    """A GPU lent in short slices: `--phases` runs into one folder add up."""
    run_phases(
        [Step("first", "harness.phases:finishes", 5)], tmp_path, dry_run=True, device="cpu", budget_s=5, children=()
    )
    doc = run_phases(
        [Step("second", "harness.phases:finishes", 5)], tmp_path, dry_run=True, device="cpu", budget_s=5, children=()
    )
    assert list(doc["phases"]) == ["first", "second"]
    # a real run does not mix with a dry run's figures
    doc = run_phases(
        [Step("second", "harness.phases:finishes", 5)], tmp_path, dry_run=False, device="cpu", budget_s=5, children=()
    )
    assert list(doc["phases"]) == ["second"]
