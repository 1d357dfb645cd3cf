"""Issue 38 item 1: how long a job will take, said before it starts — its FLOPs (counted) over
the device's measured speed (memory_plan/compute_time.py, measure/vae_flops.py,
backends/device_facts.py). The counts are held to torch's FlopCounterMode on the real code; the
decisions (measure only a long job, log a long one, warn on a very long one) to fixed speeds,
so nothing here depends on this machine's."""

import importlib

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from parallel_wan.backends.device_facts import DeviceSpeed
from parallel_wan.config import resolve
from parallel_wan.config.compose import compose_settings
from parallel_wan.measure.vae_flops import decode_flops
from parallel_wan.memory_plan.compute_time import duration, job_estimate, job_flops
from parallel_wan.memory_plan.fits import architecture_of
from parallel_wan.models.registry import ARCHITECTURES

compute_time = importlib.import_module("parallel_wan.memory_plan.compute_time")


def spec_of(*overrides):
    return resolve({**compose_settings(list(overrides)), "output_dir": "unused"}, 1)


@pytest.mark.parametrize("name", ["tiny", "tiny_ti2v", "wan2.2_t2v_a14b", "wan2.2_ti2v_5b"])
def test_the_decode_count_is_the_decodes_own(name):
    """Every convolution and the middle attention of `models.vae.decode`, as FlopCounterMode
    counts them on meta tensors (within 0.5 %: it also counts a few small matmuls we skip)."""
    from parallel_wan.backends.torch import ops
    from parallel_wan.models import vae
    from parallel_wan.models.vae_shapes import param_shapes
    from parallel_wan.weights.tree import unflatten

    cfg = ARCHITECTURES[name].vae
    params = unflatten({n: torch.empty(s, device="meta") for n, s in param_shapes(cfg).items()})
    for frames, h, w in ((1, 2, 3), (3, 4, 6)):
        with FlopCounterMode(display=False) as counted:
            vae.decode(params, torch.empty((1, cfg.z_dim, frames, h, w), device="meta"), ops, cfg)
        ours = decode_flops(cfg, frames, h, w)
        assert abs(ours - counted.get_total_flops()) <= 5e-3 * counted.get_total_flops(), (
            ours,
            counted.get_total_flops(),
        )


def test_the_job_counts_every_steps_forward_with_cfg_as_the_step_plan_runs_it():
    from parallel_wan.measure.flops import forward_flops

    spec = spec_of("steps=6")
    tcfg, vcfg = architecture_of(spec, None)
    work = job_flops(spec, tcfg, vcfg)
    tokens = 5 * 8 * 8  # 17 frames → 5 latent frames; 128² → 16² latent → 8² patches
    assert work.forwards == 6 and work.denoise == 6 * forward_flops(tcfg, tokens, 2).total
    # Lightning: guidance 1 on both experts, one row per step; 4 steps
    lightning = job_flops(spec_of("model=tiny", "recipe=lightning"), tcfg, vcfg)
    assert lightning.forwards == 4 and lightning.denoise == 4 * forward_flops(tcfg, tokens, 1).total
    # a mesh: the rank's tokens, every key; its band of the decode
    cp = resolve({**compose_settings(["mesh=cp4", "steps=6"]), "output_dir": "unused"}, 4)
    ranked = job_flops(cp, tcfg, vcfg)
    assert ranked.denoise == 6 * forward_flops(tcfg, tokens // 4, 2, key_tokens=tokens).total
    assert ranked.decode == decode_flops(vcfg, 5, 4, 16)


def never_measure():
    pytest.fail("the device was measured for a short job")


def test_a_normal_start_measures_nothing_and_says_nothing():
    spec = spec_of()
    tcfg, vcfg = architecture_of(spec, None)
    assert job_estimate([spec], tcfg, vcfg, measure=never_measure) is None


def test_a_job_far_beyond_the_device_is_warned_about_with_its_estimate():
    """The issue's `num_frames=401 height=512 width=512` on a CPU doing 40 GFLOP/s: its first
    step alone took over 9 minutes (10 steps: 93 min measured here)."""
    spec = spec_of("num_frames=401", "height=512", "width=512")
    tcfg, vcfg = architecture_of(spec, None)
    line, warn = job_estimate([spec], tcfg, vcfg, measure=lambda: DeviceSpeed(4e10, "a test CPU", True))
    assert warn and line.startswith(
        "this job will take about 1.6 h on a test CPU (228 TFLOP per device: 10 transformer "
        "steps 222 TFLOP + VAE decode 6.52 TFLOP, at 100% of the 0.04 TFLOP/s"
    ), line
    assert "Ctrl-C" in line and "python -m parallel_wan.plan" in line
    # a GPU takes half its GEMM peak: 2 TFLOP/s → about 4 min (announced, not warned about); 1000 → nothing
    line, warn = job_estimate([spec], tcfg, vcfg, measure=lambda: DeviceSpeed(4e11, "a GPU", False))
    assert not warn and line.startswith("this job will take about 19 min on a GPU"), line
    assert job_estimate([spec], tcfg, vcfg, measure=lambda: DeviceSpeed(4e13, "a GPU", False)) is None


def test_a_prompt_file_jobs_estimate_adds_its_entries():
    spec = spec_of("num_frames=401", "height=512", "width=512")
    tcfg, vcfg = architecture_of(spec, None)
    one, _ = job_estimate([spec], tcfg, vcfg, measure=lambda: DeviceSpeed(4e10, "x", True))
    three, _ = job_estimate([spec] * 3, tcfg, vcfg, measure=lambda: DeviceSpeed(4e10, "x", True))
    assert "about 1.6 h" in one and "about 4.8 h" in three and "684 TFLOP" in three


def test_the_run_logs_the_warning_before_anything_loads(monkeypatch, caplog):
    from parallel_wan import run
    from parallel_wan.backends import device_facts

    monkeypatch.setattr(device_facts, "measure_device", lambda *a: DeviceSpeed(4e10, "a test CPU", True))
    job, ckpt = run.validate_job(
        compose_settings(["num_frames=401", "height=512", "width=512", "output_dir=unused"]), 1, env={}
    )
    caplog.set_level("INFO", logger="parallel_wan")
    run._announce_duration(job, ckpt)
    (record,) = [r for r in caplog.records if "this job will take" in r.message]
    assert record.levelname == "WARNING" and "about 1.6 h on a test CPU" in record.message


def test_the_plan_prints_the_time_here_and_on_a_named_device(capsys):
    from parallel_wan.memory_plan.cli import time_lines

    text = time_lines(
        spec_of("num_frames=401", "height=512", "width=512"),
        device_tflops=989,
        measure=lambda: DeviceSpeed(4e10, "a test CPU", True),
    )
    assert text.splitlines()[0].startswith("time (dense, no step cache): about 1.6 h on a test CPU (228 TFLOP")
    assert text.splitlines()[1].strip().startswith("at device_tflops=989: about 0.5 s")


def test_the_plans_device_tflops_is_checked(capsys):
    from parallel_wan.memory_plan import main

    assert main(["device_memory_gb=24", "device_tflops=fast"]) == 2
    assert "device_tflops='fast' is not a number" in capsys.readouterr().err


@pytest.mark.parametrize(
    "seconds, said",
    [
        (0.001, "under 0.01 s"),
        (0.25, "0.2 s"),
        (4.2, "4.2 s"),
        (75, "75 s"),
        (600, "10 min"),
        (5 * 3600, "5.0 h"),
        (3 * 86400, "3 days"),
    ],
)
def test_durations_read_as_people_say_them(seconds, said):
    assert duration(seconds) == said


def test_the_device_probe_measures_a_positive_speed_and_names_the_device():
    from parallel_wan.backends.device_facts import measure_device

    speed = measure_device("torch", "cpu", "float32", seconds=0.05)
    assert speed.flops > 0 and speed.name.startswith("this CPU") and speed.cpu


def test_the_probe_measures_this_cpu_where_device_cuda_names_a_gpu_the_machine_lacks(monkeypatch):
    """The planner and the doctor run where the job's device=cuda is not (a login node, a
    machine the doctor is about to call unfit): they measure what is here rather than fail."""
    from parallel_wan.backends.device_facts import measure_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    speed = measure_device("torch", "cuda", "float32", seconds=0.05)
    assert speed.cpu and speed.name.startswith("this CPU")
