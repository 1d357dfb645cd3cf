"""The real generate() on fake CUDA GPUs (tests/fakegpu): every rank of every mesh preset, one
device in bf16 and fp32 for each task, the memory modes and compile=true — each checked for
device and dtype mismatches, one GPU per rank, NCCL's device rule, cross-rank agreement of the
collectives, the CUDA-only branches having run, a quiet denoising loop and bf16 matmuls.
No numbers are checked here (fake tensors carry none): the CPU tests hold the numerics."""

import os

import pytest

from fakegpu.checks import all_problems, attention_kernels
from fakegpu.simulate import BLACKWELL, HOPPER, Checkpoints, simulate

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
MESHES = sorted(name[:-5] for name in os.listdir(os.path.join(CONF, "mesh")) if name.endswith(".yaml"))


def world_of(mesh: str) -> int:
    import yaml

    with open(os.path.join(CONF, "mesh", f"{mesh}.yaml")) as f:
        m = yaml.safe_load(f)
    return m["dp"] * m["cp"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return Checkpoints(str(tmp_path_factory.mktemp("fakegpu")))


def check(sim, **rules):
    problems = all_problems(sim, **rules)
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("model", ["tiny", "tiny_i2v", "tiny_ti2v"])
def test_one_gpu(files, model, dtype):
    image = [f"image={files.image}"] if model != "tiny" else []
    sim = simulate([f"model={model}", f"dtype={dtype}", *image], 1, files)
    check(sim, bf16=dtype == "bfloat16")
    # no sequence parallelism on one GPU: attention is torch's own SDPA, never the math formula
    assert attention_kernels(sim) == {"sdpa (torch chooses on the GPU)"}


@pytest.mark.parametrize("mesh", MESHES)
def test_every_mesh_preset(files, mesh):
    world = world_of(mesh)
    # 48 px: 3×3 latent patches per frame, so ulysses/ring shards need padding on 2, 4 and 8 ranks
    size = ["height=48", "width=48"] if mesh in ("ulysses4", "ring8", "cp2", "dp2_cp4") else []
    sim = simulate([f"mesh={mesh}", *size], world, files)
    check(sim)
    if world > 1:
        assert sim.ledger.calls[1], "rank 1 issued no collective"
    if sim.ranks[0].recorder.attention_kernels() - {"sdpa (torch chooses on the GPU)"}:
        assert attention_kernels(sim) >= {"cuda_cudnn"}


@pytest.mark.parametrize("capability", [HOPPER, BLACKWELL], ids=["sm_90", "sm_100"])
@pytest.mark.parametrize("dtype,kernel", [("bfloat16", "cuda_cudnn"), ("float32", "cuda_efficient")])
def test_attention_kernel_by_gpu(files, capability, dtype, kernel):
    """The kernel sequence-parallel attention chooses (attention.py's order, flash-attn not
    installed): cuDNN for bf16 on Hopper and Blackwell, the memory-efficient kernel for fp32."""
    sim = simulate(["mesh=cp2", f"dtype={dtype}"], 2, files, capability=capability)
    check(sim, bf16=dtype == "bfloat16")
    chosen = attention_kernels(sim) - {"sdpa (torch chooses on the GPU)"}
    print(f"sm_{capability[0]}{capability[1]} {dtype}: attention kernel {sorted(chosen)}")
    assert chosen == {kernel}


def test_memory_sharded(files):
    sim = simulate(["mesh=cp4", "memory=sharded"], 4, files)
    check(sim, at_least={"Stream": 1, "Event.record": 1, "Stream.wait_event": 1})  # FSDP2's own streams


@pytest.mark.parametrize("prefetch", [0, 2])
def test_memory_swap(files, prefetch):
    sim = simulate(["memory=swap", f"swap_prefetch_steps={prefetch}", "steps=6"], 1, files)
    check(sim, at_least={"pin_memory": 1, "Stream": 1, "Event.record": 1, "Stream.wait_event": 1,
                         "record_stream": 1, "stream context": 1})
    pinned = [t for t in sim.ranks[0].recorder.loop_transfers() if t.pinned]
    assert pinned, "the low-noise expert never came in from pinned memory during the loop"


def test_compile_aot_eager(files):
    sim = simulate(["compile=true"], 1, files, compile_backend="aot_eager")
    check(sim)
