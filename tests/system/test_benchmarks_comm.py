"""The byte count behind BENCHMARKS.md is right: at tiny sizes, the bytes the counting shim sees
the real Ulysses, ring and hybrid attention send equal the analytic formulas exactly (integers,
so exact equality, no tolerance). A correctness check of the count, not a timing."""

import pytest

from benchmarks.comm_volume import ModelShape, analytic, batch_per_rank, load_preset, measure
from parallel_wan.config import MeshSpec

pytestmark = pytest.mark.system

# float32 so the CFG exchange (sent as float32 by the pipeline) is also at its minimum here.
SHAPE = ModelShape(heads=4, head_dim=8, dtype="float32", out_features=64, layers=2, steps=2)
TOKENS = 11  # pads for cp 2 (6 + 6) and cp 4 (3 × 4): padded tokens travel too, and are counted

CASES = {
    2: [load_preset("cp2"), MeshSpec("ring2", dp=1, cp=2, ulysses=1, ring=2), load_preset("dp2")],
    4: [load_preset("ulysses4"), load_preset("ring4"), load_preset("usp2x2"), load_preset("dp2_cp2")],
}


@pytest.mark.parametrize("world", sorted(CASES))
def test_measured_bytes_equal_the_analytic_volume(world):
    specs = CASES[world]
    results = measure(specs, TOKENS, SHAPE)
    for spec, res in zip(specs, results):
        got, want = res["volume"], analytic(spec, TOKENS, SHAPE)
        assert res["uniform"], f"{spec.name}: ranks sent different amounts"
        assert not res["unexpected"] and res["attention_other"] == 0, f"{spec.name}: uncounted collectives"
        assert (got.ulysses, got.ring) == (want.ulysses, want.ring), f"{spec.name}: {got} != {want}"
        assert got.cfg_per_step == want.cfg_per_step, f"{spec.name}: {got} != {want}"
        # The formulas themselves, spelled out for one element size, so a wrong formula cannot
        # agree with a wrong count: x = batch × local tokens × heads × head_dim × 4 bytes.
        x = batch_per_rank(spec) * -(-TOKENS // spec.cp) * SHAPE.heads * SHAPE.head_dim * 4
        expected = {
            "cp2": (2 * x, 0),
            "ring2": (0, 2 * x),
            "dp2": (0, 0),
            "ulysses4": (3 * x, 0),
            "ring4": (0, 6 * x),
            "usp2x2": (2 * x, 2 * x),
            "dp2_cp2": (2 * x, 0),
        }[spec.name]
        assert (got.ulysses, got.ring) == expected, f"{spec.name}: {got}"
