"""The real generate() on fake CUDA GPUs (tests/harness/fakegpu): every rank of every mesh preset, one
device in bf16 and fp32 for each task, the memory modes and compile=true — each checked for
device and dtype mismatches, one GPU per rank, NCCL's device rule, cross-rank agreement of the
collectives, the CUDA-only branches having run, a quiet denoising loop and bf16 matmuls.
No numbers are checked here (fake tensors carry none): the CPU tests hold the numerics.
The VAE decode runs on fake GPUs once per decode class (world size × height: `_decode_class`)
and in every one-GPU run; the other runs leave it out."""

import os

import pytest
from harness.fakegpu.checks import all_problems, attention_kernels
from harness.fakegpu.meshes import mesh_degrees
from harness.fakegpu.simulate import BLACKWELL, HOPPER, simulate
from harness.paths import REPO

CONF = os.path.join(REPO, "conf")
SDPA = "sdpa (torch chooses on the GPU)"
MESHES = sorted(name[:-5] for name in os.listdir(os.path.join(CONF, "mesh")) if name.endswith(".yaml"))


@pytest.fixture(scope="module")
def files(fake_gpu_checkpoints):
    return fake_gpu_checkpoints  # the session's tiny checkpoints (conftest.py), read-only


def check(sim, **rules):
    problems = all_problems(sim, **rules)
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("model", ["tiny", "tiny_i2v", "tiny_ti2v"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_one_gpu(files, model, dtype):
    image = [f"image={files.image}"] if model != "tiny" else []
    sim = simulate([f"model={model}", f"dtype={dtype}", *image], 1, files)
    check(sim, bf16=dtype == "bfloat16")
    # one GPU, attention_impl=auto: self-attention is the table's kernel (cuDNN in bf16 on Hopper,
    # the memory-efficient one in fp32), cross-attention torch's own SDPA; never the math formula
    assert attention_kernels(sim) == {SDPA, "cuda_cudnn" if dtype == "bfloat16" else "cuda_efficient"}


def _size(mesh: str) -> list[str]:
    # 48 px: 3×3 latent patches a frame, 18 tokens: the 4- and 8-way sequence splits are padded
    return ["height=48", "width=48"] if mesh in ("ulysses4", "ring8", "cp2", "dp2_cp4") else []


def _decode_class(mesh: str) -> tuple:
    """What the VAE decode of a run depends on: it is split by height over every rank (the
    world, not the mesh's axes: the tokens have met over cp and dp before it), and the height
    decides the bands (32 px: 4 latent rows, fewer than 8 ranks; 48 px: 6, uneven over 4 and 8)."""
    degrees = mesh_degrees(mesh)
    return degrees["dp"] * degrees["cp"], tuple(_size(mesh))


# The first preset of each decode class decodes; the others leave the decode out (`decode=False`:
# half of a run's fake ops, and rank 0's second run its shape headers cause) — their decode is
# the same program on the same bands as one that ran.
DECODED: dict[tuple, str] = {}
for _mesh in MESHES:
    DECODED.setdefault(_decode_class(_mesh), _mesh)


# Half the presets on sm_90, half on sm_100: the kernel choice is checked on both GPUs without
# running every mesh twice.
@pytest.mark.parametrize(
    "mesh,capability",
    [(m, (HOPPER, BLACKWELL)[i % 2]) for i, m in enumerate(MESHES)],
    ids=lambda v: v if isinstance(v, str) else f"sm_{v[0]}{v[1]}",
)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_every_mesh_preset(files, mesh, capability):
    degrees = mesh_degrees(mesh)
    world = degrees["dp"] * degrees["cp"]
    decode = DECODED[_decode_class(mesh)] == mesh
    sim = simulate([f"mesh={mesh}", *_size(mesh)], world, files, capability=capability, decode=decode)
    check(sim)
    if world > 1:
        assert all(sim.ledger.calls[r] for r in range(world)), "a rank issued no collective"
    # attention_impl=auto: cuDNN's kernel in bf16 on both GPUs, with or without sequence
    # parallelism (attention.py's order, flash-attn not installed); cross-attention is torch's own SDPA
    chosen = attention_kernels(sim) - {SDPA}
    print(f"mesh={mesh} sm_{capability[0]}{capability[1]}: attention kernels {sorted(chosen) or [SDPA]}")
    assert chosen == {"cuda_cudnn"}


@pytest.mark.parametrize("capability", [HOPPER, BLACKWELL], ids=["sm_90", "sm_100"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_fp32_attention_kernel(files, capability):
    """fp32 has no flash or cuDNN kernel: the memory-efficient one, on both GPUs."""
    # the decode is left out: the VAE runs in float32 in every run; its cp2 decode is test_every_mesh_preset's
    sim = simulate(["mesh=cp2", "dtype=float32"], 2, files, capability=capability, decode=False)
    check(sim, bf16=False)
    assert attention_kernels(sim) - {SDPA} == {"cuda_efficient"}


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_memory_sharded(files):
    # the decode is left out: the memory modes place the experts, not the VAE; the cp4 decode is
    # test_every_mesh_preset's
    sim = simulate(["mesh=cp4", "memory=sharded"], 4, files, decode=False)
    check(sim, at_least={"Stream": 1, "Event.record": 1, "Stream.wait_event": 1})  # FSDP2's own streams


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_batch_of_requests_on_dp2_cp2(files):
    """A server's batch (serve/worker.py): four requests with their own seeds and negative prompts
    as one generation, the prompts split over dp (each dp group's forward reads its prompts' own
    negative rows), stopped after step 1 and split into the members' states — the dp exchange of
    jobs/batch_states.py — under NCCL's rules on 4 fake GPUs."""
    import dataclasses

    from parallel_wan.jobs.batch import batched
    from parallel_wan.jobs.batch_states import member_states

    def four(spec):
        def member(i):
            return dataclasses.replace(spec, video=dataclasses.replace(spec.video, seed=i, negative_prompt=f"not {i}"))

        return batched([member(i) for i in range(4)])

    def split(gen, spec, backend):
        return [tuple(state.latents.shape) for state in member_states(gen.state, spec, backend)]

    sim = simulate(["mesh=dp2_cp2"], 4, files, decode=False, transform=four, stop_after=1, after=split)
    check(sim)
    assert all(sim.ledger.calls[r] for r in range(4)), "a rank issued no collective"
    for rank in sim.ranks:  # each rank holds two prompts' tokens; split, the four members' one each
        assert len(rank.after) == 4 and {shape[0] for shape in rank.after} == {1}, rank.after


@pytest.mark.parametrize("prefetch", [0, 2])
def test_memory_swap(files, prefetch):
    sim = simulate(["memory=swap", f"swap_prefetch_steps={prefetch}", "steps=6"], 1, files)
    check(
        sim,
        at_least={
            "pin_memory": 1,
            "Stream": 1,
            "Event.record": 1,
            "Stream.wait_event": 1,
            "record_stream": 1,
            "stream context": 1,
        },
    )
    pinned = [t for t in sim.ranks[0].recorder.loop_transfers() if t.pinned]
    assert pinned, "the low-noise expert never came in from pinned memory during the loop"


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_compile_aot_eager(files):
    sim = simulate(["compile=true"], 1, files, compile_backend="aot_eager")
    check(sim)


@pytest.fixture(scope="module")
def driving(files):
    """Animate's driving videos (9 frames: two 5-frame segments sharing one) and S2V's portrait
    and speech, beside the session's tiny checkpoints."""
    from parallel_wan.builtin.animate_examples import write_examples as animate_examples
    from parallel_wan.builtin.s2v_examples import write_examples as s2v_examples

    return {
        "animate": animate_examples(os.path.join(files.folder, "animate_inputs"), 9, 32, 32, 32),
        "s2v": s2v_examples(os.path.join(files.folder, "s2v_inputs"), 64),
    }


@pytest.mark.parametrize(
    "model,mesh,world",
    [("tiny_animate", "cp2", 2), ("tiny_s2v", "cp2", 2)],
    ids=["animate-cp2", "s2v-cp2"],
)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_animate_and_s2v_segments_on_fake_gpus(files, driving, model, mesh, world):
    """Issue 42's variants on fake GPUs, segment by segment: Animate in two segments with CFG
    and its pose and face tokens over cp (the CLIP tower on the GPU), S2V in two
    clips over cp (the motion frames decoded and re-encoded between them; wav2vec2 on the host,
    as the text encoder). The segment inputs are made once per segment (host_side.
    segment_inputs_once); each step's forward is bf16 with no host copy, every rank issues its
    collectives and they agree — a server's preview's gather of the segment's video included."""
    if model == "tiny_animate":
        inputs = {k: driving["animate"][k] for k in ("image", "pose_video", "face_video")}
        extra = ["guidance_high=2.0", "guidance_low=2.0"]  # both CFG halves: the blank face crops too
    else:
        inputs = dict(driving["s2v"])
        extra = ["num_frames=4", "height=64", "width=64", "num_clips=2"]  # S2V: 64-pixel multiples, 4k clips
    overrides = [f"model={model}", f"mesh={mesh}", *extra, *(f"{k}={v}" for k, v in inputs.items())]
    sim = simulate(overrides, world, files, preview_at=1)  # a server's preview after the first step
    assert sim.problems() == []
    steps_done, shown = sim.ranks[0].preview  # the segment's video latents meet on rank 0, once
    assert steps_done == 1 and len(shown) == 5 and sim.ranks[1].preview is None
    check(sim, host_decision=shown)  # the watched step's one copy to rank 0's host: the preview's, by design
    assert all(sim.ledger.calls[r] for r in range(world)), "a rank issued no collective"
    assert attention_kernels(sim) - {SDPA} == {"cuda_cudnn"}
