"""sparse=, sparse_dense_steps=, sparse_decay_factor=, sparse_block= (config/sparse.py): read,
recorded only when on, and every combination that cannot run refused in one line before
anything loads."""

import pytest
from harness.settings import assert_refused, spec_for

from parallel_wan.jobs.keys import result_key

ON = ["sparse=radial", "steps=4", "sparse_dense_steps=1"]


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


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["sparse=sliding"], ["sparse='sliding'", "none, radial"]),
        ([*ON, "sparse_block=48"], ["sparse_block=48", "16, 32, 64, 128"]),
        ([*ON, "sparse_decay_factor=0"], ["sparse_decay_factor=0", "positive"]),
        (["sparse=radial", "sparse_dense_steps=-1"], ["sparse_dense_steps=-1", "≥ 0"]),
        ([*ON, "sparse_dense_layers=2"], ["sparse_dense_layers=2", "all 2 blocks", "model=tiny"]),
        (["sparse_block=16"], ["sparse_block=16", "sparse=none", "sparse=radial"]),
        (["sparse=radial", "steps=8"], ["sparse_dense_steps=11", "steps=8", "sparse_dense_steps=2"]),
        ([*ON, "backend=jax"], ["sparse=radial", "backend=jax", "backend=torch"]),
        ([*ON, "sequence_parallel=xfuser"], ["sparse=radial", "sequence_parallel=xfuser", "sequence_parallel=ours"]),
        ([*ON, "model=tiny_animate"], ["sparse=radial", "segment by segment", "sparse=none"]),
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
