"""Every mesh renders the one-device video: the whole generation (text broadcast, sharded
latents, sequence-parallel attention, CFG parallel, one gather) on gloo processes."""

import os
import subprocess
import sys

import numpy as np
import pytest
from harness.frames import RTOL, assert_same_video
from harness.hold import Hold
from harness.images import write_png
from harness.ranks import PEER_TIMEOUT_S, free_port, generate_on_rank, launch_rank, rank_zero_code, run_on_ranks
from harness.videos import write_source_video

from parallel_wan.run import CONF_DIR

REPO = os.path.dirname(CONF_DIR)


BASE = ["dtype=float32", "steps=3", "num_frames=9", "seed=3", "prompt='a dog jumps'"]
T2V = BASE + ["height=48", "width=48"]  # 3×3×3 = 27 tokens: pads for cp 2, 4, 8
T2V_EVEN = BASE + ["height=64", "width=64"]  # 3×4×4 = 48 tokens: divides cp 2, 4, 8
TI2V = BASE + ["model=tiny_ti2v", "height=96", "width=64"]  # 3×3×2 = 18 tokens


@pytest.fixture(scope="module")
def one_device():
    cache = {}

    def get(overrides):
        key = tuple(overrides)
        if key not in cache:
            cache[key] = run_on_ranks(generate_on_rank, 1, list(overrides), timeout_s=300)[0]
        return cache[key]

    return get


@pytest.mark.parametrize(
    "world, mesh, base",
    [
        (2, ["mesh=cp2"], T2V),  # ulysses 2, padded
        (2, ["mesh=cp2", "mesh.ulysses=1", "mesh.ring=2"], T2V),  # ring 2, padded
        (2, ["mesh=dp2"], T2V_EVEN),  # CFG parallel
        (4, ["mesh=usp2x2"], T2V),  # ulysses 2 × ring 2, padded
        (4, ["mesh=ring4"], T2V_EVEN),  # ring 4, divides
        (4, ["mesh=dp2_cp2"], T2V),  # CFG parallel × ulysses 2
        (4, ["mesh=dp2_cp2", "mesh.ulysses=1", "mesh.ring=2"], TI2V),  # TI2V: CFG × ring, per-token t
        (4, ["mesh=ulysses4"], TI2V),  # TI2V ulysses 4, padded
    ],
)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_mesh_matches_one_device(one_device, world, mesh, base):
    ref = one_device(base)
    got = run_on_ranks(generate_on_rank, world, base + mesh, timeout_s=300)[0]
    info = assert_same_video(got, ref)
    assert info["cp"] * (2 if "dp2" in mesh[0] else 1) == world


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_eight_ranks_dp2_cp4(one_device):
    ref = one_device(T2V)
    assert_same_video(run_on_ranks(generate_on_rank, 8, T2V + ["mesh=dp2_cp4"], timeout_s=600)[0], ref)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_video_to_video_on_meshes_matches_one_device(one_device, tmp_path_factory):
    """video= (a server's remix): the source encoded on every rank, noised, each rank keeping its
    tokens, the loop started part-way — the one-device video on ulysses 2 (padded) and, with
    TaylorSeer deciding from the first step run (it predicts the second: test_magcache_schedule.py),
    on dp2 × ring 2; TI2V with a first frame held over the noised source on ulysses 2."""
    source = tmp_path_factory.mktemp("v2v") / "source.mp4"
    write_source_video(source, frames=9, height=48, width=48)
    base = T2V + [f"video={source}", "strength=0.7"]  # steps 1 and 2 of 3
    four = [o for o in T2V if not o.startswith("steps=")] + ["steps=4", f"video={source}", "strength=0.75"]
    cached = four + ["cache=taylorseer", "cache.warmup=1", "cache.interval=2", "cache.order=1"]  # runs 1 2 | 3
    image = write_png(source.parent / "first.png", 64, 96)
    with_image = TI2V + [f"video={source}", "strength=0.7", f"image={image}"]  # TI2V's held first frame
    for world, mesh, overrides in (
        (2, ["mesh=cp2"], base),
        (4, ["mesh=dp2_cp2", "mesh.ulysses=1", "mesh.ring=2"], cached),
        (2, ["mesh=cp2"], with_image),
    ):
        ref = one_device(overrides)
        assert_same_video(run_on_ranks(generate_on_rank, world, overrides + mesh, timeout_s=300)[0], ref)


PROMPTS = ["prompt=['a dog jumps','a red car at night']"]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_dp_splits_a_batch_of_prompts(one_device):
    # Two prompts on dp2 × ulysses 2: each dp group denoises one prompt; rank 0 gets both videos.
    both = one_device(T2V + PROMPTS)
    latents, frames, mesh = run_on_ranks(generate_on_rank, 4, T2V + PROMPTS + ["mesh=dp2_cp2"], timeout_s=300)[0]
    assert latents.shape[0] == 2 and mesh["dp"] == 2
    assert_same_video((latents, frames, mesh), both)
    # Video i is seeded seed + i: the second prompt's video equals a one-prompt run with seed 4.
    alone = one_device([o for o in T2V if not o.startswith("seed=")] + ["seed=4", "prompt='a red car at night'"])
    err = np.linalg.norm(latents[1] - alone[0][0]) / np.linalg.norm(alone[0][0])
    assert err <= RTOL


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_dead_rank_ends_the_job_with_a_message(tmp_path):
    # Two ranks started the way torchrun starts them (env vars), without torchrun's agent, so
    # nothing but our own failure handling ends rank 0 once rank 1 is killed mid-denoise: both
    # hold before step 2, rank 1 is killed there, and rank 0 goes on into step 2's collectives.
    # It must end long before dist_timeout_s (rank_zero_code): it noticed the death itself.
    port, out, hold = free_port(), tmp_path / "out", Hold(tmp_path, step=2)
    extra = ["steps=4", f"dist_timeout_s={PEER_TIMEOUT_S}"]
    logs = [tmp_path / f"rank{r}.log" for r in range(2)]
    ranks = [launch_rank(r, 2, port, out, extra, env=hold.env(), log=logs[r]) for r in range(2)]
    try:
        hold.wait_held(processes=2, alive=lambda: all(p.poll() is None for p in ranks), context=logs[0].read_text)
        ranks[1].kill()
        ranks[1].wait(timeout=60)
        hold.release()
        rc = rank_zero_code(ranks)
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
    text = logs[0].read_text()
    assert rc != 0
    assert "parallel_wan: rank 0/2 failed" in text, text[-2000:]
    assert not out.exists()  # nothing half-written


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_torchrun_cli_writes_one_folder_and_logs_from_rank_zero(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "parallel_wan.run",
            f"output_dir={out}",
            "mesh=cp2",
            "steps=2",
            "num_frames=5",
            "height=64",
            "width=64",
            "save_frames=true",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("TIMING SUMMARY") == 1
    assert proc.stderr.count("] model=tiny") == 1  # the start-up line, logged by rank 0 only
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no per-rank folders, no Hydra folders
    assert sorted(os.listdir(out)) == ["frames.npy", "video.json", "video.mp4"]
