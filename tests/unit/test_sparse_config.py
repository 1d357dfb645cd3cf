"""sparse=, sparse_dense_steps=, sparse_decay_factor=, sparse_block= (config/sparse.py): read,
recorded only when on, and every combination that cannot run refused in one line before
anything loads."""

import pytest
from harness.settings import assert_refused, spec_for

from parallel_wan.config.compose import compose_spec
from parallel_wan.errors import ConfigError
from parallel_wan.jobs.keys import result_key

ON = ["sparse=radial", "steps=4", "sparse_dense_steps=1"]
SVG = ["sparse=svg", "steps=4", "sparse_dense_steps=1"]


def test_sparse_settings_are_read_and_recorded_only_when_on():
    dense = spec_for()
    assert not dense.sparse_attention.on and "sparse" not in dense.to_dict()
    spec = spec_for(*ON, "sparse_block=16", "sparse_decay_factor=0.5")
    s = spec.sparse_attention
    assert (s.kind, s.dense_steps, s.dense_layers, s.decay_factor, s.block) == ("radial", 1, 1, 0.5, 16)
    record = spec.to_dict()
    assert {k: record[k] for k in s.record()} == {
        "sparse": "radial",
        "sparse_dense_steps": 1,
        "sparse_dense_layers": 1,
        "sparse_decay_factor": 0.5,
        "sparse_block": 16,
    }
    # it changes the video: a sparse run is not keyed as the dense one
    assert result_key(spec) != result_key(spec_for("steps=4"))
    # the defaults are Radial Attention's Wan 2.2 settings
    default = spec_for("sparse=radial", "steps=40").sparse_attention
    assert (default.dense_steps, default.dense_layers, default.decay_factor, default.block) == (11, 1, 0.8, 64)
    assert "sparse_density" not in spec.to_dict()  # svg's own setting: a radial run's keys stay as they were


def test_svg_settings_are_read_and_recorded():
    spec = _two_ranks(*SVG, "sparse_density=0.25", "mesh=cp2")  # Ulysses holds whole sequences
    s = spec.sparse_attention
    assert (s.kind, s.density, s.block) == ("svg", 0.25, 64)
    record = spec.to_dict()
    assert {k: record[k] for k in s.record()} == {
        "sparse": "svg",
        "sparse_dense_steps": 1,
        "sparse_dense_layers": 1,
        "sparse_density": 0.25,
        "sparse_block": 64,
    }
    assert "sparse_decay_factor" not in record
    assert result_key(spec) != result_key(_two_ranks(*SVG, "mesh=cp2"))  # the density changes the video


def test_svg_on_a_ring_is_refused():
    """svg reorders a head's whole sequence; a ring splits it (Ulysses inside it too)."""
    for mesh in (["mesh.ulysses=1", "mesh.ring=2"], ["mesh.ulysses=1", "mesh.ring=2", "sparse_density=0.5"]):
        with pytest.raises(ConfigError) as err:
            _two_ranks(*SVG, "mesh=cp2", *mesh)
        for word in ("sparse=svg", "ring of 2", "mesh.ulysses=2, mesh.ring=1", "sparse=radial"):
            assert word in str(err.value), str(err.value)


def _two_ranks(*overrides):
    return compose_spec(list(overrides), 2, output_dir="/tmp/unused")


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["sparse=sliding"], ["sparse='sliding'", "none, radial, svg"]),
        ([*ON, "sparse_block=48"], ["sparse_block=48", "16, 32, 64, 128"]),
        ([*ON, "sparse_decay_factor=0"], ["sparse_decay_factor=0", "positive"]),
        (["sparse=radial", "sparse_dense_steps=-1"], ["sparse_dense_steps=-1", "≥ 0"]),
        ([*ON, "sparse_dense_layers=2"], ["sparse_dense_layers=2", "all 2 blocks", "model=tiny"]),
        (["sparse_block=16"], ["sparse_block=16", "sparse=none", "sparse=radial"]),
        (["sparse=radial", "steps=8"], ["sparse_dense_steps=11", "steps=8", "sparse_dense_steps=2"]),
        ([*ON, "backend=jax"], ["sparse=radial", "backend=jax", "backend=torch"]),
        ([*ON, "sequence_parallel=xfuser"], ["sparse=radial", "sequence_parallel=xfuser", "sequence_parallel=ours"]),
        ([*ON, "model=tiny_animate"], ["sparse=radial", "segment by segment", "sparse=none"]),
        ([*SVG, "sparse_density=0"], ["sparse_density=0", "between 0 and 1"]),
        ([*SVG, "sparse_density=1.5"], ["sparse_density=1.5", "between 0 and 1"]),
        ([*SVG, "sparse_decay_factor=0.5"], ["sparse_decay_factor=0.5", "sparse=radial", "but sparse=svg"]),
        ([*ON, "sparse_density=0.2"], ["sparse_density=0.2", "sparse=svg", "but sparse=radial"]),
        (["sparse_density=0.2"], ["sparse_density=0.2", "sparse=none", "add sparse=svg"]),
        ([*SVG, "backend=jax"], ["sparse=svg", "backend=jax", "backend=torch"]),
    ],
    ids=[
        "kind",
        "block",
        "decay",
        "dense_steps",
        "dense_layers",
        "without_sparse",
        "all_dense",
        "jax",
        "xfuser",
        "animate",
        "svg_density_zero",
        "svg_density_over_one",
        "svg_with_decay",
        "radial_with_density",
        "density_without_sparse",
        "svg_jax",
    ],
)
def test_sparse_refusals(overrides, words):
    assert_refused(overrides, words)


def test_a_steps_first_blocks_stay_dense():
    """sparse_dense_layers: a step's self-attention calls are its blocks in order; the first ones
    and every call of a dense step run dense."""
    import numpy as np

    from parallel_wan.backends.torch.sparse_attention import SparseAttention
    from parallel_wan.parallel.block_visits import BlockMask

    sparse = SparseAttention(BlockMask(np.eye(2, dtype=bool), 16, 32), dense_layers=2)
    sparse.start_step(False)
    assert [sparse.takes_layer() for _ in range(4)] == [False] * 4
    sparse.start_step(True)
    assert [sparse.takes_layer() for _ in range(4)] == [False, False, True, True]
