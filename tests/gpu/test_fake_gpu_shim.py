"""Canaries for the fake-GPU harness itself (tests/harness/fakegpu): it must still catch what a real GPU
refuses. The harness leans on torch internals (FakeTensorMode, the fake process group, c10's
FakeGuardImpl); after a torch upgrade these fail loudly instead of the GPU tests silently
checking nothing."""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from harness.fakegpu.collectives import checked_collectives, nccl_as_fake
from harness.fakegpu.cuda_runtime import FakeCudaRuntime
from harness.fakegpu.errors import CollectiveError, FakeCudaError
from harness.fakegpu.fake_mode import fake_gpus
from harness.fakegpu.ledger import Call, Ledger


def test_cuda_tensors_index_move_and_keep_their_device():
    with fake_gpus(), torch.inference_mode():
        x = torch.randn(4, 8, device="cuda", dtype=torch.bfloat16)
        assert x[1:3].device == torch.device("cuda", 0)  # needs the C++ guard
        assert x.to("cuda:3").device == torch.device("cuda", 3)
        assert torch.as_tensor([1, 2], device="cuda").tolist() == [1, 2]  # values kept, no real copy ran


def test_a_cpu_and_cuda_mix_is_caught():
    with fake_gpus():
        x = torch.randn(4, 8, device="cuda")
        with pytest.raises(RuntimeError, match="cuda:0 and cpu"):
            x + torch.randn(4, 8)
        with pytest.raises(RuntimeError, match="cuda:0 and cuda:1"):
            x + torch.randn(4, 8, device="cuda:1")
        with pytest.raises(FakeCudaError, match="different|one device"):  # the fake conv alone would miss it
            F.conv3d(torch.randn(1, 2, 3, 4, 4, device="cuda"), torch.randn(2, 2, 1, 1, 1))


def test_a_bf16_fp32_matmul_is_caught():
    with fake_gpus():
        a = torch.randn(4, 8, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(FakeCudaError, match="one dtype"):
            a @ torch.randn(8, 2, device="cuda")


def test_cuda_runtime_applies_torchs_own_argument_rules():
    runtime = FakeCudaRuntime(devices=2)
    with fake_gpus(runtime):
        with pytest.raises(ValueError, match="specified index"):
            torch.cuda.set_device(torch.device("cuda"))  # what device=cuda used to do
        with pytest.raises(FakeCudaError, match="invalid device ordinal"):
            torch.cuda.set_device(5)
        torch.cuda.set_device(torch.device("cuda", 1))
        assert torch.cuda.current_device() == 1
        x = torch.randn(2, device="cuda:1")
        with pytest.raises(FakeCudaError, match="can't convert cuda:1"):
            x.numpy()
        with pytest.raises(FakeCudaError, match="only CPU tensors can be pinned"):
            x.pin_memory()
        with pytest.raises(FakeCudaError, match="needs a torch.cuda.Event"):
            torch.cuda.current_stream().wait_event(torch.cuda.Stream(1))
        with pytest.raises(FakeCudaError, match="record_stream"):
            x.record_stream(torch.cuda.Stream(0))
    assert runtime.calls["set_device"] == 3


def test_host_reads_and_copies_are_recorded_with_their_phase():
    with fake_gpus() as mode, torch.inference_mode():
        x = torch.randn(3, device="cuda")
        mode.recorder.phase = "step 1"
        x.sum().item()
        x.cpu()
    assert mode.recorder.loop_host_reads() == [("step 1", "item()", "cuda:0")]
    assert [(t.source, t.target) for t in mode.recorder.loop_transfers()] == [("cuda:0", "cpu")]


def _one_rank(rank, world, ledger, body):
    runtime = FakeCudaRuntime(devices=world)
    ledger.start_rank(rank)
    with fake_gpus(runtime), nccl_as_fake(rank, world, runtime), checked_collectives(ledger, rank, runtime):
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
        body(rank)


def test_a_collective_off_this_ranks_gpu_is_caught():
    def wrong_gpu(rank):
        dist.all_reduce(torch.ones(4, device="cuda:0"))  # rank 1 must use cuda:1

    with pytest.raises(CollectiveError, match="tensor on cuda:0; NCCL on this rank needs cuda:1"):
        _one_rank(1, 2, Ledger(), wrong_gpu)

    def host_buffer(rank):
        dist.recv(torch.empty(4), 0)

    with pytest.raises(CollectiveError, match="tensor on cpu"):
        _one_rank(1, 2, Ledger(), host_buffer)


def test_nccl_needs_this_ranks_gpu_at_init():
    runtime = FakeCudaRuntime(devices=2)
    with fake_gpus(runtime), nccl_as_fake(1, 2, runtime):
        torch.cuda.set_device(1)
        with pytest.raises(FakeCudaError, match="current device is cuda:1"):
            dist.init_process_group("nccl", device_id=torch.device("cuda", 0))


def test_the_ledger_catches_ranks_that_disagree():
    ledger = Ledger()

    def gather(rank):  # rank 1 takes another branch: a longer shard
        x = torch.ones(4 + rank, device=f"cuda:{rank}")
        dist.all_gather([torch.empty_like(x) for _ in range(2)], x)
        if rank == 0:
            dist.send(torch.ones(3, device="cuda:0"), 1)
        else:
            dist.recv(torch.empty(5, device="cuda:1"), 0)
            dist.all_reduce(x)

    for rank in range(2):
        _one_rank(rank, 2, ledger, gather)
    problems = "\n".join(ledger.mismatches())
    assert "call #0: ranks disagree" in problems
    assert "call counts differ" in problems
    assert "sent ((3,), 'float32'), received into ((5,), 'float32')" in problems
    consistent = Ledger(
        calls={
            0: [Call("all_reduce", (0, 1), (((4,), "float32", "cuda:0"),))],
            1: [Call("all_reduce", (0, 1), (((4,), "float32", "cuda:1"),))],
        }
    )
    assert consistent.mismatches() == []
