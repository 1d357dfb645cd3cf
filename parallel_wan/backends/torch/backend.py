"""The PyTorch backend as the orchestrator sees it: device choice, the mesh and its collectives,
parameter placement with the dtype policy, the attention callable and host↔device moves."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...config import MeshSpec
from ...sharding import SequenceShards
from ...weights.tree import map_leaves
from . import ops
from .distributed import Collectives, Launch, init_distributed
from .mesh import TorchMesh


def pick_device(setting: str, local_rank: int = 0) -> torch.device:
    if setting == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        return torch.device("cpu")
    device = torch.device(setting)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={setting} but this machine has no CUDA device; use device=cpu or device=auto")
    return device


class TorchBackend:
    name = "torch"
    single_controller = False  # one process per device; each rank computes its own shard
    compiles_ahead = False  # eager: no warm-up phase

    def __init__(self, device: str = "auto", mesh: MeshSpec | None = None, launch: Launch | None = None,
                 dist_timeout_s: float = 600.0, attention_impl: str = "ours"):
        launch = launch or Launch(0, 1, 0, "single process")
        self.device = pick_device(device, launch.local_rank)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.ops = ops
        ops.set_default_device(self.device)
        init_distributed(launch, self.device, dist_timeout_s)
        self.mesh = TorchMesh.build(mesh or MeshSpec())
        self.collectives = Collectives(self.mesh)
        self.attention_impl = attention_impl

    # ------------------------------------------------------------ mesh
    @property
    def rank(self) -> int:
        return self.mesh.rank

    @property
    def is_main(self) -> bool:
        return self.mesh.rank == 0

    @property
    def writes_outputs(self) -> bool:
        return self.is_main

    @property
    def text_device(self) -> torch.device:
        return self.device

    def index(self, axis: str) -> int:
        return self.mesh.index(axis)

    def self_attention_for(self, shards: SequenceShards) -> Callable:
        """Self-attention over this rank's `shards.local` tokens of `shards.tokens` valid ones."""
        if self.attention_impl == "xfuser":
            from .xfuser_attention import make_xfuser_attention

            return make_xfuser_attention(self.mesh, shards.tokens, shards.local)
        from .sequence_parallel import make_self_attention

        return make_self_attention(self.mesh, shards.tokens, shards.local)

    def broadcast_from_main(self, tensor):
        return self.collectives.broadcast_from_rank0(
            None if tensor is None else torch.as_tensor(tensor), self.device)

    def gather_tokens(self, local):
        return self.collectives.gather_tokens(local)

    def exchange_dp(self, local):
        return self.collectives.exchange_dp(local)

    # ------------------------------------------------------------ arrays
    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def place(self, tree, dtype: str, keep_fp32: Callable[[str], bool] | None = None):
        """Move a param tree to the device, casting to `dtype` except where `keep_fp32(name)`."""
        target = ops.dtype(dtype)

        def move(name, t):
            if not t.is_floating_point():
                return t.to(self.device)
            want = torch.float32 if keep_fp32 is not None and keep_fp32(name) else target
            return t.to(device=self.device, dtype=want)

        return map_leaves(move, tree)

    def to_device(self, array: np.ndarray | torch.Tensor, dtype: str | None = None) -> torch.Tensor:
        t = torch.as_tensor(array).to(self.device)
        return t.to(ops.dtype(dtype)) if dtype else t

    def to_host(self, x: torch.Tensor) -> np.ndarray:
        return ops.to_numpy(x)

    def inference_mode(self):
        return torch.inference_mode()

    # ------------------------------------------------------------ generation parts
    def noise_predictor(self, task):
        """`predict(expert, x, t, guidance)` on this rank's shard (pipeline.DenoiseTask)."""
        from .predictor import EagerNoisePredictor

        return EagerNoisePredictor(task, self)

    def video_decoder(self, vae_params, vae_config):
        """`decode(latents)` → uint8 frames per video, on the main rank ([] elsewhere)."""
        return EagerVideoDecoder(self, vae_params, vae_config)

    def vae_encode(self, params, video: np.ndarray, cfg):
        from ...models import vae

        return vae.encode(params, self.to_device(video), ops, cfg)


class EagerVideoDecoder:
    def __init__(self, backend: TorchBackend, params, cfg):
        self.backend, self.params, self.cfg = backend, params, cfg

    def compile(self, latent_shape) -> dict:
        return {}

    def __call__(self, latents) -> list[np.ndarray]:
        from ...frames import to_uint8_frames
        from ...models import vae  # looked up per call: benchmarks stub vae.decode

        if not self.backend.is_main:
            return []
        videos = []
        for row in range(latents.shape[0]):
            z = vae.denormalize_latents(latents[row : row + 1], self.cfg, ops)
            video = vae.decode(self.params, z, ops, self.cfg)
            videos.append(self.backend.to_host(to_uint8_frames(video, ops)).astype(np.uint8))
        return videos
