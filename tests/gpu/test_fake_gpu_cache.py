"""Every step cache (cache=magcache|taylorseer|fbcache) on fake CUDA GPUs (tests/harness/fakegpu): each
rank of a sequence-parallel mesh, of CFG parallel over dp and of memory=sharded runs the real
generate(), and the cross-rank ledger proves the ranks took the same branch at every step —
a rank that skips the block stack while a peer runs it issues fewer attention exchanges or
FSDP gathers, which on NCCL is a hang; here it is a ledger mismatch.

MagCache's and TaylorSeer's schedules are host data made before the loop: those runs go
through as they are, and their loops must stay quiet (no host sync at all).

First-Block Cache decides from activations, and fake tensors have no values: read on the
host, every sum would be zero and every step would compute, so the skipping branches would
never run and nothing would be proved. The honest way here is host values for the one thing
the decision reads: each rank's local sums (caching.first_block.branch_sums, the project's
own fake tensor — device, dtype and shape are the project's) carry values the test chooses
per rank and step (host_side.first_block_values). The project's own all_gather, float64 sum
in rank order and host read then run unchanged; the harness hands each member's values
through the gather (a rank gathering from a peer that has not run yet runs again once it
has, and the ledger holds every part received to what its member sent). The values are
chosen so that the ranks' *local* metrics would decide differently while the group's sum
skips: a rank deciding on its own shard diverges, and the ledger says so (planted below and
in harness/fakegpu/planted.py). No activation value is checked here: the CPU tests hold the numerics.

The VAE decode is left out (`decode=False`): a cache changes the loop; the decode of every mesh
is test_fake_gpu_runs'.
"""

import pytest
from harness.fakegpu.checks import all_problems, one_gpu_per_rank
from harness.fakegpu.meshes import mesh_degrees
from harness.fakegpu.simulate import Checkpoints, simulate, spec_of

THRESHOLD = 0.05  # conf/cache/fbcache.yaml
# 7 steps: 5 high-noise (0-4), 2 low-noise (5-6), each expert's first step fresh. First-Block
# Cache's planted pattern (`change`) then skips cond at 1, 3, 4, 6 and uncond at 3, 6 and computes
# both at 2: every path, both branches skipping in both experts (8 steps, as before, left uncond's
# skips in the high-noise expert alone). MagCache skips 1, 2, 4, 6, TaylorSeer predicts 2 and 4.
STEPS = 7


@pytest.fixture(scope="module")
def files(fake_gpu_checkpoints):
    return fake_gpu_checkpoints  # the session's tiny checkpoints (conftest.py), read-only


def _with_three_layers(monkeypatch) -> None:
    import dataclasses

    from parallel_wan.models import registry

    tiny = registry.ARCHITECTURES["tiny"]
    monkeypatch.setitem(
        registry.ARCHITECTURES,
        "tiny",
        dataclasses.replace(tiny, transformer=dataclasses.replace(tiny.transformer, num_layers=3)),
    )


@pytest.fixture(scope="module")
def three_layer_files(tmp_path_factory):
    """The 3-block checkpoints, built once for the module (read-only)."""
    files = Checkpoints(str(tmp_path_factory.mktemp("fakegpu_three_layers")))
    with pytest.MonkeyPatch.context() as patch:
        _with_three_layers(patch)
        files.for_spec(spec_of(["model=tiny"]))
    return files


@pytest.fixture
def three_layers(three_layer_files, monkeypatch):
    """The tiny model with 3 blocks, its own checkpoints. memory=sharded prefetches block
    i + 1 while block i runs: with the tiny model's 2 blocks, running block 0 alone issues
    the same FSDP gathers as running both, and a rank skipping while a peer computes would
    go unseen."""
    _with_three_layers(monkeypatch)
    return three_layer_files


def fresh_steps(info: dict) -> set[int]:
    """Each expert's first step (always computed, nothing carried over)."""
    starts, i = set(), 0
    for n in info["steps_per_expert"].values():
        starts.add(i)
        i += n
    return starts


# --------------------------------------------------------------- First-Block Cache's metric
def change(step: int, branch: str) -> float:
    """The relative change of block 0's residual the test plants for the whole group: every
    third step (i % 3 == 0) both branches skip, then cond skips alone, then both compute."""
    phase = step % 3
    if phase == 2:
        return 0.45
    return 0.045 if branch == "cond" or phase == 0 else 0.135


def planted_metric(mesh: str):
    """metric(rank, step, branches) → this rank's local (branches, 2) sums [Σ|r − r_ref|, Σ|r_ref|]:
    every shard has Σ|r_ref| = 1, and the last shard of each cp group holds the whole change.
    Summed over the group the ratio is `change`; locally the last shard sees cp × change
    (above the threshold) and the others 0 (below): ranks deciding alone disagree."""
    degrees = mesh_degrees(mesh)
    cp = degrees["cp"]

    def metric(rank: int, step: int, branches: int):
        names = ["cond", "uncond"] if branches == 2 else [["cond", "uncond"][rank // cp]]  # CFG parallel: dp index
        last = rank % cp == cp - 1
        return [[change(step, name) * cp if last else 0.0, 1.0] for name in names]

    return metric


def expected_skips(info: dict) -> dict:
    fresh = fresh_steps(info)
    return {
        name: [i for i in range(STEPS) if i not in fresh and change(i, name) <= THRESHOLD]
        for name in ("cond", "uncond")
    }


def fb_gathers(sim, rank: int) -> list:
    """The group sums' all_gathers of `rank`: float32 (branches, 2)."""
    return [
        c
        for c in sim.ledger.calls[rank]
        if c.op == "all_gather"
        and c.tensors[0][1] == "float32"
        and len(c.tensors[0][0]) == 2
        and c.tensors[0][0][1] == 2
        and c.values is not None
    ]


def check(sim, **rules):
    problems = all_problems(sim, **rules)
    assert not problems, "\n".join(problems[:12])


FB_MESHES = [("cp2", []), ("dp2", []), ("dp2_cp2", []), ("cp2", ["memory=sharded"]), ("dp2", ["memory=sharded"])]


@pytest.mark.parametrize("mesh,extra", FB_MESHES, ids=[" ".join([m, *e]) for m, e in FB_MESHES])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_first_block_cache_ranks_decide_together(request, mesh, extra):
    files = request.getfixturevalue("three_layers" if "memory=sharded" in extra else "files")
    degrees = mesh_degrees(mesh)
    world, cp = degrees["dp"] * degrees["cp"], degrees["cp"]
    cfg_parallel = degrees["dp"] > 1
    # CFG parallel decides each branch on its dp half (as one device does); under
    # memory=sharded the halves also see each other's sums (FSDP's gathers span both halves:
    # they must run the same block passes), as a (2, 2) sum over the world
    lockstep = cfg_parallel and "memory=sharded" in extra
    sums_shape = (2, 2) if lockstep or not cfg_parallel else (1, 2)
    sim = simulate(
        [f"mesh={mesh}", "cache=fbcache", f"steps={STEPS}", *extra],
        world,
        files,
        first_block_metric=planted_metric(mesh),
        decode=False,
    )
    # the one sync First-Block Cache costs: its float64 group sums, read once a step
    check(sim, host_decision=sums_shape, **({"at_least": {"Stream": 1}} if "memory=sharded" in extra else {}))
    want = expected_skips(sim.ranks[0].info)
    assert want["cond"] and want["uncond"] and want["cond"] != want["uncond"]  # all three paths run
    for run in sim.ranks:  # every rank logs the one-device decisions (CFG parallel: both halves met)
        record = run.info["cache"]
        assert record["skipped"] == want, f"rank {run.rank}: {record['skipped']}"
    # NCCL's rules for the sums' gather: on this rank's GPU (checked at the call), over this
    # rank's cp group (lockstep: the world), once per probed step; none without a group
    probed = STEPS - len(fresh_steps(sim.ranks[0].info))
    for r in range(world):
        gathers = fb_gathers(sim, r)
        if cp == 1 and not lockstep:
            assert gathers == []
            continue
        group = tuple(range(world)) if lockstep else tuple(range(r - r % cp, r - r % cp + cp))
        assert len(gathers) == probed and {c.group for c in gathers} == {group}
        assert {c.tensors[0] for c in gathers} == {(sums_shape, "float32", f"cuda:{r}")}


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_ranks_deciding_on_their_own_shard_are_caught(files, monkeypatch):
    """The planted bug of harness/fakegpu/planted.py, in-process: First-Block Cache decided from each
    rank's local sums (no group sum) — the last shard computes while the other skips, and the
    ledger reports the cp group's attention exchanges out of step."""
    from parallel_wan.backends.torch.exchanges import MeshExchanges

    monkeypatch.setattr(MeshExchanges, "sum_to_host", lambda self, local, axis: local.double().cpu().numpy())
    sim = simulate(
        ["mesh=cp2", "cache=fbcache", f"steps={STEPS}"],
        2,
        files,
        first_block_metric=planted_metric("cp2"),
        decode=False,
    )
    problems = sim.problems()
    assert problems and all("group (0, 1)" in p for p in problems), problems
    skipped = [run.info["cache"]["skipped"] for run in sim.ranks]
    assert skipped[0] != skipped[1]


# --------------------------------------------------------------- the host-planned caches
SCHEDULE_MESHES = [("cp2", []), ("dp2", []), ("cp2", ["memory=sharded"])]


@pytest.mark.parametrize("kind", ["magcache", "taylorseer"])
@pytest.mark.parametrize("mesh,extra", SCHEDULE_MESHES, ids=[" ".join([m, *e]) for m, e in SCHEDULE_MESHES])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_host_planned_cache(request, kind, mesh, extra):
    files = request.getfixturevalue("three_layers" if "memory=sharded" in extra else "files")
    degrees = mesh_degrees(mesh)
    world = degrees["dp"] * degrees["cp"]
    # magcache on the tiny model: the T2V-A14B curve at threshold 0.3 skips within 7 steps;
    # taylorseer: warm-up 2, interval 2 predicts from the third step of each expert
    settings = (
        ["cache.threshold=0.3", "cache.retention=0"] if kind == "magcache" else ["cache.warmup=2", "cache.interval=2"]
    )
    sim = simulate([f"mesh={mesh}", f"cache={kind}", f"steps={STEPS}", *settings, *extra], world, files, decode=False)
    check(sim, **({"at_least": {"Stream": 1}} if extra else {}))  # the loop stays quiet: no host sync
    records = [run.info["cache"] for run in sim.ranks]
    assert records[0]["skipped"]["cond"], records[0]  # steps really skipped
    assert all(r == records[0] for r in records), records  # the same record on every rank
    assert records[0]["skipped"]["cond"] == records[0]["skipped"]["uncond"]  # one decision for both rows


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_magcache_calibration_exchanges_are_nccl_legal(files):
    """cache.calibrate=true under CFG parallel × cp: the ratio sums are gathered over cp
    (0-dim and (1,) float32 on each rank's GPU), and the report's float64 calibration and
    int8 skip logs meet over dp — dtypes NCCL has (the harness refuses the others). A
    calibration run measures: it reads each step's ratio sums on the host, so the quiet-loop
    rule does not apply."""
    sim = simulate(
        ["mesh=dp2_cp2", "cache=magcache", "cache.calibrate=true", "cache.threshold=0", f"steps={STEPS}"],
        4,
        files,
        decode=False,
    )
    assert sim.problems() == [] and one_gpu_per_rank(sim) == []
    for r in range(4):
        dp_gathers = [
            c.tensors[0] for c in sim.ledger.calls[r] if c.op == "all_gather" and c.group == (r % 2, r % 2 + 2)
        ]
        assert ((STEPS, 1), "int8", f"cuda:{r}") in dp_gathers and ((STEPS, 1), "float64", f"cuda:{r}") in dp_gathers
