"""The parallel plan (parallel_wan/parallel/): torch- and JAX-free, the one place the mesh is
validated, ranks get their rows and the CFG layout is decided; collectives are handed to the
code, never patched into it."""

import pathlib

import numpy as np
import pytest
import torch
from harness.imports import FORBIDDEN, imported_roots

from parallel_wan.backends.torch.collectives import CountingCollectives, LoopbackCollectives, NullCollectives
from parallel_wan.errors import ConfigError
from parallel_wan.parallel import cfg_rows
from parallel_wan.parallel.mesh import MeshSpec, mesh_spec
from parallel_wan.parallel.work import rank_work

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "parallel_wan"


def test_parallel_package_imports_neither_torch_nor_jax():
    files = sorted((PACKAGE / "parallel").glob("*.py"))
    assert {p.name for p in files} >= {"mesh.py", "shards.py", "work.py", "cfg_rows.py", "collectives.py"}
    offenders = {p.name: sorted(set(imported_roots(p)) & FORBIDDEN) for p in files}
    assert not {k: v for k, v in offenders.items() if v}, offenders


def test_no_mock_patching_in_the_package():
    """The planner and the benchmarks hand the real code null, counting or loopback collectives;
    nothing in the package patches a module to get there."""
    hits = [
        f"{p.relative_to(PACKAGE)}:{i}"
        for p in PACKAGE.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "mock.patch" in line or "unittest.mock" in line or "from unittest import mock" in line
    ]
    assert not hits, hits


def test_mesh_is_validated_in_one_place():
    with pytest.raises(ConfigError, match=r"cp=4 must equal ulysses×ring=2×1=2"):
        mesh_spec({"name": "bad", "cp": 4, "ulysses": 2, "ring": 1}, 4)
    with pytest.raises(ConfigError, match="needs dp×cp=2×4=8 processes but 4 were started"):
        mesh_spec({"name": "dp2_cp4", "dp": 2, "cp": 4, "ulysses": 2, "ring": 2}, 4)
    spec = mesh_spec({"name": "dp2_cp4", "dp": 2, "cp": 4, "ulysses": 2, "ring": 2}, 8, heads=40)
    # dp outermost, ulysses innermost
    assert spec.coords(5) == {"dp": 1, "cp": 1, "ring": 0, "ulysses": 1}
    assert spec.group_of("ulysses", 5) == [4, 5] and spec.group_of("ring", 5) == [5, 7]
    assert spec.group_of("dp", 5) == [1, 5] and spec.size("cp") == 4


def test_rows_per_rank():
    mesh = MeshSpec("dp2_cp2", dp=2, cp=2, ulysses=2)
    # One prompt on dp = 2: CFG parallel, cond on dp 0, uncond on dp 1; tokens over cp.
    works = [rank_work(mesh, 1, 7, rank) for rank in range(4)]
    assert [(w.cp_index, w.rows, w.cfg_branch) for w in works] == [
        (0, (0,), 0),
        (1, (0,), 0),
        (0, (0,), 1),
        (1, (0,), 1),
    ]
    assert works[1].shards.local == 4 and list(works[1].token_index()) == [4, 5, 6, 7]
    # Four prompts: two per dp group, both CFG halves on every rank.
    assert [rank_work(mesh, 4, 7, r).rows for r in range(4)] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    single = rank_work(mesh, 4, 7, None)  # a single controller holds everything
    assert single.whole and single.rows == (0, 1, 2, 3) and len(single.token_index()) == 8


def test_one_cfg_layout():
    # [cond rows…, uncond rows…]; the negative prompt is the context's last row.
    assert cfg_rows.context_rows((2, 3), 4, True) == [2, 3, 4, 4]
    assert cfg_rows.context_rows((2, 3), 4, False) == [2, 3]
    assert cfg_rows.context_rows((0,), 1, True, cfg_rows.UNCOND) == [1]
    assert cfg_rows.halves_in_forward(True) == 2 and cfg_rows.halves_in_forward(True, cfg_rows.COND) == 1
    x = np.arange(6.0).reshape(2, 3)
    out = np.concatenate([x + 1.0, x])  # cond rows exceed uncond by 1
    np.testing.assert_array_equal(cfg_rows.guided(out, 2, 5.0), x + 5.0)


def test_counting_and_loopback_collectives():
    counting = CountingCollectives(LoopbackCollectives(rank=0, world=4))
    send = torch.arange(8.0).reshape(4, 2)  # dim 0: the 4 ranks of the group
    recv = torch.empty_like(send)
    counting.all_to_all(recv, send)
    assert torch.equal(recv, send)  # loopback: this rank's own message comes back
    incoming = torch.zeros(3)
    for pending in counting.exchange([(torch.ones(3), 1)], [(incoming, 3)]):
        pending.wait()
    assert torch.equal(incoming, torch.ones(3))
    counting.all_gather([torch.empty(2) for _ in range(4)], torch.ones(2))
    counting.broadcast(torch.ones(5), src=0)
    assert dict(counting.by_call) == {
        "all_to_all": 3 * 2 * 4,
        "exchange": 3 * 4,
        "all_gather": 3 * 2 * 4,
        "broadcast": 3 * 5 * 4,
    }
    null = NullCollectives(rank=1, world=2)
    # receive buffers come back zero-filled, whatever memory they were made in (a decode on
    # `empty` buffers read NaN bit patterns in a busy process: CI, test_gpu_acceptance)
    garbage = torch.full((2,), float("nan"))
    null.all_to_all(garbage, torch.ones(2))
    assert torch.equal(garbage, torch.zeros(2))
    garbage.fill_(float("nan"))
    assert null.exchange([(torch.ones(2), 0)], [(garbage, 0)]) == [] and torch.equal(garbage, torch.zeros(2))
    parts = [torch.full((2,), float("nan")) for _ in range(2)]
    null.all_gather(parts, torch.ones(2))
    garbage.fill_(float("nan"))
    null.recv(garbage, src=0)
    assert all(torch.equal(p, torch.zeros(2)) for p in parts + [garbage])
