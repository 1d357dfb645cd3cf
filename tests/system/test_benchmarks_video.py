"""benchmarks/video.py, the whole-video table, without a GPU: its dry run runs every recipe row
with the tiny model through our real `generate` and diffusers' `WanPipeline` on the same modules
(our experts' tensors are diffusers' own storage, and the two videos agree), the rows that need
CUDA kernels say why they did not run, each phase's peak memory is its own (CUDA's statistics
stood in for), and the plan's arithmetic fits one 10-minute command on an H200. Nothing is
timed: the seconds are only checked to have been recorded."""

import json

import pytest
import torch

from benchmarks import video, video_plan
from benchmarks.video_plan import FRAMES_MAX_LEVELS, RECIPES, SETUP_S

pytestmark = pytest.mark.system

RAN_ON_CPU = {"lightning bf16", "dense 480p", "lightning fp8 weights", "lightning radial", "lightning svg"}
CUDA_ONLY = {"lightning sage", "lightning fp8 attention"}  # Triton kernels, bf16/fp16 on CUDA


@pytest.mark.slow  # ≈ 6-13 s on the 2-core machine: diffusers' imports and eight tiny videos
def test_dry_run_runs_every_recipe_row_beside_diffusers(tmp_path):
    doc = video.main(["--dry-run", "--json", str(tmp_path / "video.json"), "--md", str(tmp_path / "video.md")])
    rows = {(r["recipe"], r["side"]): r for r in doc["rows"]}
    assert list(rows) == [
        (r.name, side) for r in RECIPES for side in (("ours", "diffusers") if r.diffusers else ("ours",))
    ]
    notes = {k: r.get("note") for k, r in rows.items()}
    assert {name for (name, _), r in rows.items() if r["ran"]} == RAN_ON_CPU, notes
    for (name, side), r in rows.items():
        if not r["ran"]:
            continue
        assert set(r["seconds"]) == {"text", "denoise", "decode", "total"} and min(r["seconds"].values()) > 0
        assert len(r["step_s"]) == video_plan.TIMED_STEPS  # scaled from the steps run, and says so
        assert r["scaled"]["total"] >= r["seconds"]["total"]
        assert r["scaled"]["how"].startswith(f"{video_plan.TIMED_STEPS} of {r['steps']} steps run")
        if side == "ours":  # diffusers' modules' storage: nothing copied, beyond fp8's own weights
            assert r["shared_with_diffusers"] == r["expert_tensors"] - r["quantized_tensors"] > 0
    for name in ("lightning bf16", "dense 480p"):  # the same weights, noise and schedule: the same video
        theirs = rows[(name, "diffusers")]
        assert theirs["frames_vs_ours"]["max_levels"] <= FRAMES_MAX_LEVELS
        assert theirs["diffusers_over_ours"] > 0
    assert rows[("lightning fp8 weights", "ours")]["quantized_tensors"] > 0
    assert rows[("lightning fp8 weights", "ours")]["vs_baseline"] > 0
    assert rows[("lightning radial", "ours")]["sparse"]["sparse"] == "radial"
    assert rows[("lightning svg", "ours")]["sparse"]["sparse"] == "svg"
    for name in CUDA_ONLY:
        note = rows[(name, "ours")]["note"]
        assert note.startswith("not run here") and "cuda" in note and "cpu float32" in note
    assert json.loads((tmp_path / "video.json").read_text()) == json.loads(json.dumps(doc, default=str))
    md = (tmp_path / "video.md").read_text()
    assert "Dry run on CPU" in md and "--dry-run" in md
    assert sum(line.startswith("| lightning") or line.startswith("| dense") for line in md.splitlines()) == len(rows)


def test_the_plan_fits_one_ten_minute_command_on_an_h200():
    """The docstring's arithmetic, from the H200 figures it quotes: every row predicted to run
    within the default budget, which leaves a minute of the 10 for the imports."""
    from parallel_wan.models.registry import architecture

    cfg = architecture(video_plan.A14B).transformer
    plan = video_plan.plan_rows(None)
    total = SETUP_S + sum(video_plan.predicted(r, cfg, dry=False, calibration=1.0)["seconds"] for r, _ in plan)
    assert len(plan) == 9 and 200 < total <= video.parse([]).budget_s <= 540
    dense = video_plan.predicted(RECIPES[1], cfg, dry=False, calibration=1.0)
    assert 5 < dense["step_s"] < 7  # 480p with CFG: 0.51 × the 12 s 720p forward


def test_a_row_over_its_budget_is_skipped_with_the_arithmetic():
    row = {"budget_s": 30.0}  # what is left of --budget-s when the row starts
    doc = {"dtype": "bfloat16", "budget_s": 400, "model_gb": {}}
    why = video._why_not(row, RECIPES[0], "ours", {"seconds": 31.0}, torch.device("cpu"), doc, {})
    assert why == "skipped: predicted 31 s > the 30 s left of --budget-s 400"
    assert video._why_not(row, RECIPES[0], "ours", {"seconds": 29.0}, torch.device("cpu"), doc, {}) is None
    why = video._why_not(row, RECIPES[0], "diffusers", {"seconds": 1.0}, torch.device("cpu"), doc, {})
    assert why == "our row of this recipe did not run"


def test_a_setting_this_checkout_lacks_is_recorded_not_raised(monkeypatch):
    """sparse= was being built beside this benchmark: without it the row says so."""
    from parallel_wan.config import compose

    def lacks_sparse(overrides, **kwargs):
        raise ValueError("Could not override 'sparse'. Key 'sparse' is not in struct")

    monkeypatch.setattr(compose, "compose_spec", lacks_sparse)
    spec, why = video_plan.compose(RECIPES[-1], True, "cpu", "/tmp")
    assert spec is None and why == "not available in this checkout: conf/config.yaml has no sparse= setting"
    with pytest.raises(ValueError):  # anything else is a bug, not a note
        video_plan.compose(RECIPES[0], True, "cpu", "/tmp")


class _FakeCuda:
    """A device whose type says CUDA, for the peak-memory code paths (the tensors stay on the CPU)."""

    type = "cuda"


@pytest.mark.slow  # ≈ 6 s alone: diffusers' imports (0.4 s after the dry run's)
def test_each_phase_reads_its_own_peak_on_cuda(monkeypatch):
    """The peak statistic is reset at each phase's start and read at its end, on both sides:
    a counter stands in for `max_memory_allocated`, so each phase reads the next number."""
    from benchmarks import video_diffusers
    from benchmarks.video_models import build
    from parallel_wan.pipeline.generate import texts_of

    reads = iter(range(1, 100))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: next(reads) * 1e9)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    model = build("tiny", torch.device("cpu"), torch.float32, empty_dir="/tmp")
    spec, _ = video_plan.compose(RECIPES[1], True, "cpu", "/tmp")
    assert video.run_ours(model, spec, _FakeCuda())["peak_gb"] == {"text": 1.0, "denoise": 2.0, "decode": 3.0}
    theirs = video_diffusers.run(model, spec, texts_of(spec), _FakeCuda())
    assert theirs["peak_gb"] == {"text": 4.0, "denoise": 5.0, "decode": 6.0}
    assert len(theirs["step_s"]) == video_plan.TIMED_STEPS
