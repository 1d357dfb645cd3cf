"""The PyTorch backend as the orchestrator sees it: device choice, the mesh and its collectives,
parameter placement with the dtype policy, the attention callable and host↔device moves."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ...launch import Launch
from ...parallel.collectives import Collectives
from ...parallel.mesh import MeshSpec
from ...parallel.shards import SequenceShards
from ...weights.quantized.form import placed_dtype
from ...weights.tree import map_leaves
from ..contract import Backend
from . import fp8_gemm, ops as torch_ops
from .attention import TORCH_SDPA, KernelChoice
from .exchanges import MeshExchanges
from .mesh import TorchMesh
from .world import start_world


def start_torch_backend(
    device: str = "auto",
    mesh: MeshSpec | None = None,
    launch: Launch | None = None,
    dist_timeout_s: float = 600.0,
    attention_impl: str = "auto",
    compile: bool = False,
    comm: Collectives | None = None,
    cls: type | None = None,
    sequence_parallel: str = "ours",
    quant_compute: str = "dequant",
    compile_backend: str = "inductor",
) -> TorchBackend:
    """A torch run's backend, made in torchtitan's order: the world (device, process group:
    world.py), then the mesh over it, then the backend from the two. `comm`: the collectives
    every exchange goes through (default torch.distributed's; the benchmarks pass counting ones);
    `cls`: a subclass of TorchBackend to make (tests that watch a run)."""
    chosen = start_world(launch, device, dist_timeout_s)
    mesh = TorchMesh.build(mesh or MeshSpec(), comm)
    return (cls or TorchBackend)(
        chosen,
        mesh,
        attention_impl,
        compile,
        sequence_parallel=sequence_parallel,
        quant_compute=quant_compute,
        compile_backend=compile_backend,
    )


class TorchBackend(Backend):
    """One process per device; each rank computes its own token shard. Constructing one changes
    no process-wide state: its device and mesh come made (`start_torch_backend`, the planner's
    meta backend), and its `ops` creates arrays only beside arrays it is given."""

    name = "torch"
    single_controller = False  # one process per device; each rank computes its own shard
    compiles_ahead = False  # eager: no warm-up phase

    def __init__(
        self,
        device: torch.device,
        mesh: TorchMesh,
        attention_impl: str = "auto",
        compile: bool = False,
        ops=None,
        sequence_parallel: str = "ours",
        quant_compute: str = "dequant",
        compile_backend: str = "inductor",
    ):
        self.device = torch.device(device)
        # quant_compute=auto|dequant|fp8 decided on this device (fp8_gemm.py): the ops namespace
        # the model gets (FP8 GEMMs replace `dense`) and the choice the sidecar records.
        self.quant_compute = fp8_gemm.choose(quant_compute, self.device, compiled=compile)
        self.ops = ops or fp8_gemm.ops_for(self.quant_compute)
        self.mesh = mesh
        self.exchanges = MeshExchanges(mesh)
        self.attention_impl = attention_impl
        # The local attention kernel, chosen per (device, dtype, head_dim) on first use and kept
        # here: the sidecar reads it (`attention_kernel`). sequence_parallel=xfuser: xDiT's
        # attention instead of ours (mesh and kernels its own).
        self.kernel_choice = KernelChoice(attention_impl)
        self.sequence_parallel = sequence_parallel
        # compile=true: the hot path — q/k/v fused at placement (qkv_fusion.py), the block
        # function compiled by torch.compile (runners/compiled.py; self-attention stays eager).
        # Compile backend: inductor; tests pass "aot_eager" (graph capture only) to stay fast on
        # CPU.
        self.compile = compile
        self.compile_backend = compile_backend

    # ------------------------------------------------------------ mesh
    @property
    def rank(self) -> int:
        return self.mesh.rank

    def same_on_every_rank(self, value):
        """Rank 0's `value` (a small picklable object) on every rank."""
        if self.mesh.world_size == 1:
            return value
        return self.mesh.comm.broadcast_object(value, 0)

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when `flag` is true on any (the preemption vote, once per step:
        jobs/preemption.py), through the mesh's collectives (`Collectives.vote`: one int on
        the host, no GPU sync). Also a barrier."""
        if self.mesh.world_size == 1:
            return flag
        return self.mesh.comm.vote(flag)

    @property
    def encodes_text(self) -> bool:
        return self.mesh.rank == 0

    @property
    def leader(self) -> bool:
        return self.mesh.rank == 0

    @property
    def writes_outputs(self) -> bool:
        return self.mesh.rank == 0

    @property
    def text_device(self) -> torch.device:
        return self.device

    def index(self, axis: str) -> int:
        return self.mesh.index(axis)

    def self_attention_for(self, shards: SequenceShards, sparse=None) -> Callable:
        """Self-attention over this rank's `shards.local` tokens of `shards.tokens` valid ones;
        `sparse`: sparse=radial's SparseAttention (sparse_attention.py), or None (dense)."""
        if self.sequence_parallel == "xfuser":
            from .xfuser_attention import make_xfuser_attention

            return make_xfuser_attention(self.mesh, shards.tokens, shards.local)
        from .sequence_parallel import make_self_attention

        return make_self_attention(self.mesh, shards.tokens, shards.local, self.kernel_choice, sparse)

    def attention_kernel(self, dtype: str, head_dim: int) -> str | None:
        """What attention_impl resolved to on this device for `dtype` and `head_dim` (the
        sidecar's "attention"), as this backend's kernel choice holds it."""
        if self.sequence_parallel == "xfuser":
            return "xfuser"
        # nothing chosen: auto on one CPU device, unpadded, ran torch's own SDPA dispatch
        # (attention.KernelChoice.one_device), the only attention path that chooses nothing here
        return self.kernel_choice.chosen().get((self.device.type, torch_ops.dtype(dtype), head_dim), TORCH_SDPA)

    def broadcast_from_main(self, tensor):
        return self.exchanges.broadcast_from_rank0(None if tensor is None else torch.as_tensor(tensor), self.device)

    def gather_tokens(self, local):
        return self.exchanges.gather_tokens(local)

    def exchange_dp(self, local):
        return self.exchanges.exchange_dp(local)

    # ------------------------------------------------------------ arrays
    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def weight_shard(self, memory: str) -> tuple[int, int] | None:
        """(rank, world) when memory=sharded: each rank then loads only its dim-0 chunk of every
        transformer tensor (`load_transformer(shard=…)`) and `place(where="sharded")` hands the
        chunks to FSDP (fsdp.py). None otherwise — and on one process, where there is nothing to
        shard over (memory=sharded then behaves as resident)."""
        if memory != "sharded" or self.mesh.world_size == 1:
            return None
        return self.rank, self.mesh.world_size

    def place(
        self,
        tree,
        dtype: str,
        keep_fp32: Callable[[str], bool] | None = None,
        where: str = "device",
        full_rows: dict[str, int] | None = None,
        transformer: bool = False,
        lora=None,
    ):
        """Move a param tree to the device, casting to `dtype` except where `keep_fp32(name)`.
        lora: an `ExpertLora` whose `deferred` weights the tree holds as stored: each is merged
        on the device as it moves (`merges_lora_on_device`).
        where="host": keep it in host memory (pinned on CUDA) as a swap.HostExpert, for
        memory=swap's low-noise expert. where="sharded": `tree` holds this rank's chunks (from
        `weight_shard`) and `full_rows` each tensor's whole dim 0 → an fsdp.ShardedExpert."""
        target = torch_ops.dtype(dtype)
        if where == "host":
            from .swap import to_host

            return to_host(tree, target, keep_fp32)
        if where == "sharded":
            from .fsdp import shard_expert

            return shard_expert(tree, full_rows, self.device)
        if where != "device":
            raise ValueError(f"where={where!r} is not a placement; use device, host or sharded")

        def move(name, t):  # quantized weights keep their bytes, their scales float32 (weights/quantized/)
            if lora is not None and name in lora.deferred:
                return lora.merge_on_device(name, t, self.device, placed_dtype(name, torch.float32, target, keep_fp32))
            return t.to(device=self.device, dtype=placed_dtype(name, t.dtype, target, keep_fp32))

        if transformer and self.compile and isinstance(tree.get("blocks"), list):
            from .qkv_fusion import fuse_block_qkv

            # Block by block: only one block's unfused q/k/v ever sit beside the fused weights.
            blocks = [fuse_block_qkv(map_leaves(move, block, f"blocks.{i}")) for i, block in enumerate(tree["blocks"])]
            rest = map_leaves(move, {k: v for k, v in tree.items() if k != "blocks"})
            return {**rest, "blocks": blocks}
        return map_leaves(move, tree)

    @property
    def merges_lora_on_device(self) -> bool:
        """Whether an expert placed whole here takes its LoRA merged on the device
        (lora/merge.py `merge_on_device`): on a GPU, where the GEMMs are nearly free; a CPU run
        merges as it loads (the same arithmetic, one pass fewer)."""
        return self.device.type == "cuda"

    def to_device(self, array: np.ndarray | torch.Tensor, dtype: str | None = None) -> torch.Tensor:
        t = torch.as_tensor(array).to(self.device)
        return t.to(torch_ops.dtype(dtype)) if dtype else t

    def to_host(self, x: torch.Tensor) -> np.ndarray:
        return torch_ops.to_numpy(x)

    def inference_mode(self):
        return torch.inference_mode()

    # ------------------------------------------------------------ generation parts
    def noise_predictor(self, task):
        """`predict(expert, x, t, guidance)` on this rank's shard (pipeline.DenoiseTask)."""
        from .predictor import EagerNoisePredictor

        return EagerNoisePredictor(task, self)

    def video_decoder(self, vae_params, vae_config):
        """`decode(latents)` → uint8 frames per video, on the main rank ([] elsewhere); every
        rank calls it and decodes a band of rows (vae_decode.py)."""
        from .vae_decode import EagerVideoDecoder

        return EagerVideoDecoder(self, vae_params, vae_config)

    def vae_encode(self, params, video: np.ndarray, cfg):
        """The posterior mean on every rank; every rank calls it with the same video and encodes
        a band of its rows (vae_encode.py)."""
        if not hasattr(self, "_encoder"):
            from .vae_encode import HeightSplitEncoder

            self._encoder = HeightSplitEncoder(self)
        return self._encoder(params, video, cfg)
