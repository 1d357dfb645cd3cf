"""Fake CUDA GPUs for the tests: the project's CUDA paths run on a CPU-only torch build.

    from harness.fakegpu.simulate import simulate          # the real generate(), every rank in turn
    from harness.fakegpu.checks import all_problems        # the rules a GPU run must keep

guard.py          c10's FakeGuardImpl as the CUDA device guard (C++, built once with g++, cached)
cuda_runtime.py   torch.cuda stand-ins that apply torch's own argument rules; calls counted
fake_mode.py      FakeTensorMode set up for a CPU-only build, one-dtype checks, host reads
recorder.py       what ran, where, in which dtype, per denoising step; host↔device copies
collectives.py    the "fake" process group with NCCL's device rule; ledger.py compares ranks
host_side.py      the parts fake tensors cannot follow (UMT5, DeviceMesh), run on the host
simulate.py       one run: each rank of the mesh as a torchrun worker on its fake GPU
checks.py         one GPU per rank, quiet loop, CUDA branches ran, bf16 matmuls
planted.py        plants GPU-only bugs in a scratch copy: the fake tests catch them

Verified on torch 2.13 (CPU wheel); the canaries in tests/gpu/test_fake_gpu_shim.py fail loudly if
a torch upgrade changes what the harness relies on.
"""
