"""What a simulated run must show, each as a list of sentences (empty: holds).

Kept apart from the tests so that a planted-bug script and the tests read the same rules.
"""

from __future__ import annotations

import glob
import os

from .recorder import ATTENTION_OPS
from .simulate import Simulation

# ops.asarray copies small host constants (≤ 2^16 elements) to the device once and reuses them:
# the first step may fill that cache, later steps must not copy at all.
CONSTANT_CACHE_ELEMENTS = 1 << 16


def one_gpu_per_rank(sim: Simulation) -> list[str]:
    problems = []
    devices = [r.device for r in sim.ranks]
    if devices != [f"cuda:{r}" for r in range(sim.world)]:
        problems.append(f"devices per rank {devices}; want cuda:0…cuda:{sim.world - 1}")
    for run in sim.ranks:
        if run.calls.get("set_device", 0) < 1:
            problems.append(f"rank {run.rank} never called torch.cuda.set_device")
        if sim.world > 1 and run.init_requests != [("nccl", f"cuda:{run.rank}")]:
            problems.append(
                f"rank {run.rank} asked init_process_group for {run.init_requests}; want NCCL on cuda:{run.rank}"
            )
    for rank, used in sim.ledger.devices().items():
        if used - {f"cuda:{rank}"}:
            problems.append(f"rank {rank}'s collectives used {sorted(used)}")
    return problems


def cuda_branches(sim: Simulation, at_least: dict[str, int]) -> list[str]:
    """The CUDA-only code ran: each named fake runtime call happened at least that often on
    every rank."""
    return [
        f"rank {r.rank}: {name} called {r.calls.get(name, 0)}×, want ≥ {n} (calls: {r.calls})"
        for r in sim.ranks
        for name, n in at_least.items()
        if r.calls.get(name, 0) < n
    ]


def quiet_loop(sim: Simulation, host_decision: tuple | None = None) -> list[str]:
    """Inside the denoising loop: no read of device data on the host, no copy to the host, and
    no copy from pageable host memory after the first step (each one a stall on a GPU); copies
    from pinned memory (memory=swap) are asynchronous. `host_decision`: the shape of the one
    copy to the host a step may make to decide on (First-Block Cache's group sums, the one
    sync its decision costs), at most once per step. Also allowed: the finite-latents check
    (pipeline/denoise.py `check_finite`), one scalar read per expert phase — at the switch and
    after the last step — and no more."""
    problems = []
    for run in sim.ranks:
        rec = run.recorder
        problems += [
            f"rank {run.rank}: host read {what} of {device} data in {phase}"
            for phase, what, device in rec.loop_host_reads()
        ]
        decided, finite_checks = set(), 0
        for t in rec.loop_transfers():
            if t.target == "cpu" and t.shape == host_decision and t.phase not in decided:
                decided.add(t.phase)
            elif t.target == "cpu" and t.shape == () and finite_checks < EXPERT_PHASES:
                finite_checks += 1
            elif t.target == "cpu":
                problems.append(f"rank {run.rank}: copy to the host {t}")
            elif t.pinned and not t.non_blocking:
                problems.append(f"rank {run.rank}: blocking copy from pinned memory {t}")
            elif not t.pinned and (t.phase != "step 0" or _numel(t.shape) > CONSTANT_CACHE_ELEMENTS):
                problems.append(f"rank {run.rank}: copy from pageable host memory {t}")
    return problems


EXPERT_PHASES = 2  # A14B: high-noise then low-noise; TI2V-5B has one


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def fp32_weight_shapes(checkpoint_folder: str) -> tuple[set, int]:
    """The 2-D transformer weights the model keeps in float32 whatever the run's dtype
    (models.transformer.keeps_fp32, diffusers' _keep_in_fp32_modules): their shapes, and how
    many one expert has."""
    from safetensors import safe_open

    from parallel_wan.models.transformer import keeps_fp32
    from parallel_wan.weights.transformer_keymap import official_to_diffusers_name

    shapes, count = set(), 0
    # the diffusers layout's transformer/, or the official layout's root (S2V)
    files = sorted(glob.glob(os.path.join(checkpoint_folder, "transformer", "*.safetensors")))
    official = not files
    files = files or sorted(glob.glob(os.path.join(checkpoint_folder, "*.safetensors")))
    for path in files:
        with safe_open(path, "np") as f:
            for name in f.keys():
                shape = tuple(f.get_slice(name).get_shape())
                name = official_to_diffusers_name(name) if official else name
                # Animate's motion basis is kept fp32 too, but runs once per segment, not in a step
                # (host_side.segment_inputs_once): the loop's fp32 matmuls are the time embedder's
                if keeps_fp32(name) and len(shape) == 2 and not name.startswith("motion_encoder."):
                    shapes.add(shape)
                    count += 1
    return shapes, count


def bf16_loop(sim: Simulation, checkpoint_folder: str) -> list[str]:
    """In a bf16 run every attention and every matmul of the loop is bf16, except the time
    embedder's, which the model keeps fp32 by design: fp32 matmuls only with weights of those
    shapes, no more of them than those weights × the embedder's runs. (Batched matmuls are
    attention's, checked at the attention ops: under compile the fake build decomposes SDPA
    into its fp32-upcast math form, which a GPU would not run.)"""
    allowed, per_expert = fp32_weight_shapes(checkpoint_folder)
    if not allowed:
        return [f"no fp32 weight in {checkpoint_folder}/transformer: the dtype policy cannot be checked"]
    problems = []
    for run in sim.ranks:
        rec = run.recorder
        for (op, device, dtype, phase), n in rec.ops.items():
            if op in ATTENTION_OPS and rec.in_loop(phase) and dtype != "bfloat16":
                problems.append(f"rank {run.rank}: {op} in {dtype} ×{n} in the loop")
        fp32 = {shape: n for shape, n in rec.loop_matmuls("float32").items() if len(shape) != 3}
        outside = {s: n for s, n in fp32.items() if s not in allowed}
        if outside:
            problems.append(
                f"rank {run.rank}: fp32 matmuls in the loop with weights {outside} "
                f"(the model keeps only {sorted(allowed)} in fp32)"
            )
        first_layer = min(allowed, key=lambda s: s[1])  # the embedder's input layer: freq_dim columns
        runs = sum(n for s, n in rec.loop_matmuls("float32").items() if s == first_layer)
        if sum(fp32.values()) > per_expert * runs:
            problems.append(
                f"rank {run.rank}: {sum(fp32.values())} fp32 matmuls in the loop for {runs} time-embedder runs"
            )
    return problems


def attention_kernels(sim: Simulation) -> set[str]:
    """The attention kernels the ranks' loops launched."""
    return set().union(*(r.recorder.attention_kernels() for r in sim.ranks))


def all_problems(
    sim: Simulation, at_least: dict | None = None, bf16: bool = True, host_decision: tuple | None = None
) -> list[str]:
    """Every rule above; `at_least`: CUDA runtime calls the configuration must make;
    `host_decision`: quiet_loop's."""
    problems = sim.problems()
    if problems:  # a rank failed: the other rules would only repeat it
        return problems
    problems = (
        one_gpu_per_rank(sim)
        + quiet_loop(sim, host_decision)
        + cuda_branches(sim, {"synchronize": 1, **(at_least or {})})
    )
    return problems + (bf16_loop(sim, sim.checkpoint_folder) if bf16 else [])
