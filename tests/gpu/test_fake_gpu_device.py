"""Which GPU each process takes (backends/torch/world.pick_device), on fake CUDA GPUs:
device=cuda is cuda:LOCAL_RANK, device=cuda:N is refused with several processes, and a run
asking for CUDA where there is none stops in one line — each before anything loads."""

import pytest
import torch
import torch.distributed as dist
from harness.fakegpu.checks import one_gpu_per_rank
from harness.fakegpu.cuda_runtime import FakeCudaRuntime
from harness.fakegpu.fake_mode import fake_gpus
from harness.fakegpu.simulate import simulate

from parallel_wan.backends.torch.world import pick_device
from parallel_wan.config import ConfigError

LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "JAX_COORDINATOR_ADDRESS",
    "TPU_WORKER_HOSTNAMES",
)


def test_pick_device_rules_on_eight_gpus():
    with fake_gpus(FakeCudaRuntime(devices=8)):
        assert pick_device("cuda", local_rank=3, world_size=8) == torch.device("cuda", 3)
        assert pick_device("auto", local_rank=5, world_size=8) == torch.device("cuda", 5)
        assert pick_device("cuda:2") == torch.device("cuda", 2)  # one process: that GPU
        assert pick_device("cpu", 1, 2) == torch.device("cpu")
        with pytest.raises(ConfigError, match=r"device=cuda:1 with 2 processes .* use device=cuda"):
            pick_device("cuda:1", local_rank=0, world_size=2)
        with pytest.raises(ConfigError, match=r"has 8 CUDA devices \(cuda:0…cuda:7\)"):
            pick_device("cuda:9")
        with pytest.raises(ConfigError, match="not a device"):
            pick_device("gpu0")


def test_cuda_without_cuda_is_one_line():
    with pytest.raises(ConfigError, match="no CUDA device torch can use; use device=cpu or device=auto"):
        pick_device("cuda")


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_device_cuda_puts_each_rank_on_its_own_gpu(fake_gpu_checkpoints):
    """… and a server's progress preview after step 1 (the gather of x - σ·v on NCCL, checked as
    every other collective) reaches rank 0 whole."""
    sim = simulate(["mesh=cp2"], 2, fake_gpu_checkpoints, device="cuda", preview_at=1)
    assert sim.problems() == []
    assert one_gpu_per_rank(sim) == []  # cuda:0 and cuda:1, NCCL on each rank's own GPU
    assert sim.ranks[0].preview == (1, sim.ranks[0].latents) and sim.ranks[1].preview is None


def _start_torch(monkeypatch, capsys, overrides, env):
    from parallel_wan import run

    # run.start points the package logger at this test's captured stderr: give it back after
    for attr in ("handlers", "propagate", "level"):
        value = getattr(run.log, attr)
        monkeypatch.setattr(run.log, attr, list(value) if attr == "handlers" else value)
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    raw = run.compose_settings([*overrides, "backend=torch"])
    with pytest.raises(SystemExit) as exit_:
        run.start(raw)
    assert not dist.is_initialized(), "a process group started before the refusal"
    return exit_.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("rank", [0, 1])
def test_cuda_index_under_two_ranks_is_refused_before_loading(monkeypatch, capsys, rank):
    env = {
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29511",
    }
    with fake_gpus(FakeCudaRuntime(devices=2)):
        code, err = _start_torch(monkeypatch, capsys, ["mesh=cp2", "device=cuda:1", "steps=1"], env)
    assert code == 2
    if rank == 0:  # one process says why, in one line naming the setting, the value and the fix
        assert err == [
            "parallel_wan: error: device=cuda:1 with 2 processes would put every rank on GPU 1; "
            "use device=cuda (or auto): each rank takes cuda:LOCAL_RANK (choose GPUs with "
            "CUDA_VISIBLE_DEVICES)"
        ]
    else:
        assert err == []


def test_cuda_on_a_machine_without_cuda_stops_in_one_line(monkeypatch, capsys):
    code, err = _start_torch(monkeypatch, capsys, ["device=cuda", "steps=1"], {})
    assert code == 2
    assert err == [
        "parallel_wan: error: device=cuda but this machine has no CUDA device torch can use; "
        "use device=cpu or device=auto"
    ]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_video_to_video_on_two_fake_gpus(fake_gpu_checkpoints, tmp_path):
    """video= on CUDA with a step cache: the source's VAE encode on each rank's GPU, the noised
    tokens sharded, the loop from step 1 of 4, TaylorSeer deciding from there (it predicts step
    2) — every collective agreeing across ranks under NCCL's rules."""
    from harness.videos import write_source_video

    source = tmp_path / "source.mp4"
    write_source_video(source, frames=5, height=32, width=32)
    taylor = ["cache=taylorseer", "cache.warmup=1", "cache.interval=2", "cache.order=1"]
    overrides = ["mesh=cp2", f"video={source}", "strength=0.75", "steps=4", *taylor]
    sim = simulate(overrides, 2, fake_gpu_checkpoints, device="cuda")
    assert sim.problems() == []
    assert one_gpu_per_rank(sim) == []
    for rank in sim.ranks:  # three steps of four ran (strength 0.75): the loop saw three iterations
        assert {phase for *_, phase in rank.recorder.ops if phase.startswith("step ")} == {"step 0", "step 1", "step 2"}
        assert rank.info["cache"]["skipped"] == {"cond": [2], "uncond": [2]}
