"""`python -m parallel_wan.doctor`: on this CPU machine for real, and on fake H100 / B200 GPUs
(tests/harness/fakegpu), where it must name the attention kernel the GPU generation would use."""

import io
import os
import subprocess
import sys

import pytest
from harness.fakegpu.collectives import nccl_as_fake
from harness.fakegpu.cuda_runtime import FakeCudaRuntime
from harness.fakegpu.fake_mode import fake_gpus
from harness.paths import REPO

from parallel_wan import doctor
from processes.servers import LAUNCH_VARS

ROOT = REPO


# Every weight file opened, seen through Python's audit hook (a run of the built-in tiny model
# writes and reads safetensors; the doctor must open none).
WATCH = (
    "import sys; opened = []; sys.addaudithook(lambda event, args: event == 'open' and "
    "str(args[0]).endswith(('.safetensors', '.pth', '.bin')) and opened.append(args[0])); "
    "from parallel_wan import doctor; rc = doctor.main(sys.argv[1:]); "
    "print('weight files opened:', opened); sys.exit(rc)"
)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_doctor_on_cpu_loads_no_weights():
    code = WATCH
    done = subprocess.run(
        [sys.executable, "-c", code, "model=tiny", "mesh=single"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=600,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "this process uses cpu" in out
    assert "cpu_flash (CPU)" in out
    assert "gloo group of 1, one all_reduce OK" in out
    assert "mesh=single: dp=1 × cp=1" in out
    assert "FITS" in out and out.strip().splitlines()[-2] == "ready"
    assert "weight files opened: []" in out


def fake_doctor(capability, argv, devices=8):
    runtime, out = FakeCudaRuntime(devices=devices, capability=capability), io.StringIO()
    with fake_gpus(runtime), nccl_as_fake(0, 1, runtime):
        code = doctor.main(argv, out=out)
    return code, out.getvalue()


@pytest.mark.parametrize(
    "capability,line",
    [
        ((9, 0), "cuda_cudnn on sm_90 (flash-attn 3 is not installed"),
        ((10, 0), "cuda_cudnn on sm_100"),
        ((8, 0), "cuda_flash on sm_80"),
    ],
    ids=["H100", "B200", "A100"],
)
def test_doctor_names_the_attention_kernel_of_each_gpu(capability, line):
    code, out = fake_doctor(capability, ["model=tiny"])
    assert code == 0, out
    assert f"capability {capability[0]}.{capability[1]}" in out
    assert "this process uses cuda:0" in out
    assert line in out
    assert "nccl" not in out or "OK" in out
    assert "one all_reduce OK" in out


@pytest.mark.parametrize(
    "impl,line,code",
    [
        ("cudnn", "attention_impl=cudnn → cuda_cudnn (bfloat16, head_dim 128)", 0),
        ("flash", "PROBLEM: attention_impl=flash needs flash-attn (3 on Hopper, or 2)", 1),
    ],
)
def test_doctor_checks_the_attention_impl_set(impl, line, code):
    got, out = fake_doctor((9, 0), ["model=tiny", f"attention_impl={impl}"])
    assert (got, line in out) == (code, True), out


def test_each_line_is_one_write():
    """Ranks share one terminal or pipe: a line written in two pieces (print's text, then its
    newline) let rank 1's PROBLEM line land inside rank 0's line in CI. Every line is one write."""

    class Writes(io.StringIO):
        def __init__(self):
            super().__init__()
            self.calls = []

        def write(self, text):
            self.calls.append(text)
            return super().write(text)

    out = Writes()
    checks = doctor.Doctor(["model=tiny"], out=out)
    checks.say("torch 2.x; CUDA build: False")
    checks.problem("device=cuda but this machine has no CUDA device")
    assert out.calls == ["torch 2.x; CUDA build: False\n", "PROBLEM: device=cuda but this machine has no CUDA device\n"]


def test_doctor_reports_a_refused_device_setting():
    code, out = fake_doctor((9, 0), ["model=tiny", "mesh=cp2", "device=cuda:1"])
    assert code == 1
    assert "PROBLEM: device=cuda:1 with 2 processes would put every rank on GPU 1" in out
    assert "launch with `torchrun --nproc-per-node 2 -m parallel_wan.run mesh=cp2 ...`" in out


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_doctor_under_torchrun_reports_a_world_the_mesh_does_not_use():
    # parallel_wan.run refuses this launch (cp4 needs 4 processes, 2 were started): so must the doctor
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)} | {"PYTHONPATH": ROOT}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "parallel_wan.doctor",
            "model=tiny",
            "mesh=cp4",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr[-3000:]
    assert (
        out.count(
            "PROBLEM: mesh=cp4 needs dp×cp=1×4=4 processes but 2 were started; launch with "
            "`torchrun --nproc-per-node 4 -m parallel_wan.run mesh=cp4`\n"
        )
        == 1
    ), out  # once, from rank 0
    assert "ready" not in out.splitlines() and out.count("1 problem(s); see PROBLEM lines") == 1, out
    assert "communication: gloo group of 2, one all_reduce OK" in out, out  # the other checks still ran


def test_slow_attention_fallbacks_are_flagged():
    assert doctor.kernel_verdict("cuda_efficient", (9, 0), "bfloat16")[1]
    assert doctor.kernel_verdict("math", (10, 0), "bfloat16")[1]
    assert not doctor.kernel_verdict("cuda_cudnn", (10, 0), "bfloat16")[1]
    assert not doctor.kernel_verdict("flash_attn3", (9, 0), "bfloat16")[1]
    assert "dtype=bfloat16" in doctor.kernel_verdict("cuda_efficient", (9, 0), "float32")[0]
