"""Issue 38 item 1: the fit check before anything loads, for every size.

The check compares the planner's cheap upper bound (memory_plan/bound.py, arithmetic only) and
runs the planner only when the bound is over the device. That is safe only while the bound is
never below the planner: held here for every phase over a grid of models, meshes, dtypes, sizes,
step caches, prompt batches, memory modes and quantized weights — and useful only while it is
not far above it, so that the runs people start (far below a device) never pay for the planner.
The planner's loop count past RUN_TOKENS tokens per rank is extrapolated from two smaller
videos; held here equal to the direct count."""

import importlib
import itertools

import pytest

from parallel_wan.config.compose import compose_settings
from parallel_wan.memory_plan import fits, planning_spec
from parallel_wan.memory_plan.architecture import architecture
from parallel_wan.memory_plan.bound import MARGIN, phase_bounds
from parallel_wan.memory_plan.report import plan

denoise_bytes = importlib.import_module("parallel_wan.memory_plan.denoise_bytes")


def spec_of(*overrides, image=None):
    raw = {**compose_settings(list(overrides)), "output_dir": "unused"}
    if image is not None:
        raw["image"] = str(image)
    mesh = raw["mesh"]
    return planning_spec(raw, int(mesh.get("dp", 1)) * int(mesh.get("cp", 1)))


GRID = [
    *(
        ["model=tiny", f"mesh={mesh}", f"dtype={dtype}", *size]
        for mesh, (dtype, size) in itertools.product(
            ["single", "cp2", "ring4", "dp2_cp4"],
            [
                ("float32", ["num_frames=5", "height=64", "width=64"]),
                ("bfloat16", ["num_frames=33", "height=256", "width=256"]),
            ],
        )
    ),
    ["model=tiny_ti2v", "mesh=usp2x2", "num_frames=33", "height=256", "width=256"],
    ["model=tiny_i2v", "mesh=dp2_cp2", "cache=fbcache", "prompt=[a,b]"],
    ["model=tiny", "cache=taylorseer", "prompt=[a,b,c]", "memory=swap"],
    ["model=tiny", "mesh=cp2", "memory=sharded", "quantize=int8", "cache=magcache"],
    ["model=wan2.2_t2v_a14b", "mesh=dp2_cp4"],
    ["model=wan2.2_i2v_a14b", "mesh=ulysses4", "num_frames=17", "height=128", "width=128", "memory=swap"],
    ["model=wan2.2_ti2v_5b", "num_frames=121", "height=704", "width=1280", "quantize=fp8"],
    ["model=wan2.2_t2v_a14b_lightning", "mesh=ring4", "num_frames=33", "height=480", "width=832"],
    ["model=tiny", "sparse=svg", "steps=4", "sparse_dense_steps=1", "num_frames=17", "height=128", "width=272"],
]


@pytest.mark.slow  # ~20 plans (over 5 s in the suite's run: tests/README.md)
@pytest.mark.parametrize("overrides", GRID, ids=lambda o: " ".join(o))
def test_the_bound_is_never_below_the_planner_and_not_far_above_it(overrides, tmp_path):
    from PIL import Image

    image = None
    if "i2v" in overrides[0]:
        image = tmp_path / "x.png"
        Image.new("RGB", (16, 16)).save(image)
    spec = spec_of(*overrides, image=image)
    tcfg, vcfg, text = architecture(spec)
    p = plan(spec)
    bounds = phase_bounds(spec, tcfg, vcfg, text)
    assert set(bounds) == set(p.phases)
    for phase, planned in p.phases.items():
        assert bounds[phase] >= planned, (phase, bounds[phase], planned)
    # the activations (what the planner counts by running the code) within the margin's reach
    act = p.denoise.total
    bound_act = bounds["denoise"] - (p.phases["denoise"] - act)
    assert MARGIN * act <= bound_act <= 4 * act, bound_act / act


def test_the_check_of_a_normal_start_never_runs_the_planner(monkeypatch):
    """The built-in model's default video on a 24 GB host, and A14B 720p on eight 80 GB GPUs:
    the bound decides (microseconds; no torch), the planner is not asked."""
    report = importlib.import_module("parallel_wan.memory_plan.report")
    monkeypatch.setattr(report, "plan", lambda spec: pytest.fail("the planner ran"))
    fits.check_fits(spec_of(), budget=24e9)
    fits.check_fits(spec_of("model=wan2.2_t2v_a14b", "mesh=dp2_cp4", "memory=sharded"), budget=80e9)


def test_near_the_device_the_planner_decides():
    """A14B 720p resident on one 80 GB GPU: the bound is over 80 GB, the planner's 83.29 GB too
    (refused with its numbers); on a 141 GB H200 both fit; at 84 GB only the planner says it fits."""
    spec = spec_of("model=wan2.2_t2v_a14b")
    with pytest.raises(fits.ConfigError, match=r"the planner puts its peak at 83\.29 GB .* has 80\.00 GB"):
        fits.check_fits(spec, budget=80e9)
    fits.check_fits(spec, budget=84e9)
    fits.check_fits(spec, budget=141e9)


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=wan2.2_t2v_a14b", "num_frames=121", "height=720", "width=1280"],  # over RUN_TOKENS in time
        [
            "num_frames=5",
            "height=8192",
            "width=4096",
            "dtype=float32",
        ],  # one latent frame is over it: cut in height too
        ["model=tiny_ti2v", "num_frames=121", "height=2048", "width=2048", "cache=taylorseer"],
    ],
)
def test_the_extrapolated_loop_equals_the_direct_count(overrides):
    spec = spec_of(*overrides)
    tcfg, vcfg, _ = architecture(spec)
    shapes = denoise_bytes.rank_shapes(spec, tcfg, vcfg)
    assert shapes.local > denoise_bytes.RUN_TOKENS
    direct = denoise_bytes.denoise_bytes(spec, tcfg, shapes)
    extrapolated = denoise_bytes.denoise_bytes(spec, tcfg, shapes, vcfg)
    assert extrapolated.held == direct.held
    assert abs(extrapolated.loop - direct.loop) <= 1e-6 * direct.loop, (extrapolated, direct)
