"""Per-rank memory and time of the PyTorch VAE decode, whole on one process against split by
height over 2 and 4 gloo processes (backends/torch/vae_decode.py).

Memory, two ways, per rank (the table shows the largest over ranks):
- tensors: the most bytes held at once by the tensors the decode's ops return (a dispatch
  mode counting each storage until it is freed): activations, the time cache, halo and
  gather buffers and the decoded band, without kernels' private workspaces. This is the
  number the split is for.
- allocated: the peak of the bytes the CPU allocator hands out during the decode, from the
  torch profiler's allocation and free events (CPU has no max_memory_allocated), workspaces
  included. ATen's CPU conv3d uses oneDNN only when N·C·T·H > 20,480 (width not counted) and
  otherwise an im2col path whose buffer is 27 × its input. A band's fewer rows cross that line
  at this narrowed width, so this column shrinks less than the tensors column; at the real
  width 96 and 720p only the latent-resolution convs would, from 8 ranks on, with small
  buffers; GPUs have no such switch.
Weights and latents were placed before and count in neither. Time: wall seconds of the
decode on rank 0, with both counters on. Frames: rank 0's uint8 video against one process.

A Wan 2.1 VAE (z 16) decoder with random weights at 720p (90 × 160 latent rows × columns),
narrowed from 96 base channels to --base-dim so a decode fits a 2-core CPU: width scales
every activation alike, so the split's ratios hold; absolute bytes scale with the width
(×12 at the real 96). The processes share 2 cores (and the machine other work), so times
are not a speed-up claim, only a check that the halo exchanges cost little.

    python -m benchmarks.vae_decode                                   # 1280×720, 5 frames, base 8
    python -m benchmarks.vae_decode --height 480 --width 832 --base-dim 96 --latent-frames 1
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np


def _live_tensor_peak():
    """A dispatch mode recording the most bytes held at once by tensors the decode's ops made
    (storages counted once, until freed): activations without kernels' private workspaces."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class LiveTensors(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live: dict[int, tuple] = {}
            self.peak = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    storage = t.untyped_storage()
                    if storage.data_ptr() not in self.live or self.live[storage.data_ptr()][0].expired():
                        self.live[storage.data_ptr()] = (StorageWeakRef(storage), storage.nbytes())
            self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
            self.peak = max(self.peak, sum(nbytes for _, nbytes in self.live.values()))
            return out

    return LiveTensors()


def decode_on_rank(rank: int, world: int, cfg, state: dict, z: np.ndarray) -> dict:
    import torch
    import torch.profiler as tp

    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.distributed import Launch
    from parallel_wan.config import MeshSpec
    from parallel_wan.weights import tree

    backend = TorchBackend("cpu", MeshSpec(name=f"cp{world}", cp=world, ulysses=world),
                           Launch(rank, world, rank, "benchmark"))
    decoder = backend.video_decoder(tree.unflatten({k: torch.from_numpy(v) for k, v in state.items()}), cfg)
    latents = torch.from_numpy(z)
    with (torch.inference_mode(), tp.profile(activities=[tp.ProfilerActivity.CPU], profile_memory=True) as prof,
          _live_tensor_peak() as tensors):
        t0 = time.perf_counter()
        videos = decoder(latents)
        seconds = time.perf_counter() - t0
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    allocated = np.cumsum([nbytes for _, nbytes in events])
    return {"peak_bytes": int(allocated.max()) if len(allocated) else 0, "tensor_bytes": tensors.peak,
            "seconds": seconds, "frames": videos[0] if videos else None}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--latent-frames", type=int, default=2, help="2 → 5 video frames: the first chunk, then one of 4")
    p.add_argument("--base-dim", type=int, default=8, help="decoder base channels (the real Wan 2.1 VAE: 96)")
    p.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4])
    p.add_argument("--threads", type=int, default=2, help="CPU threads shared by all ranks of a run")
    args = p.parse_args(argv)
    import torch
    from diffusers import AutoencoderKLWan

    from parallel_wan.backends.torch.vae_decode import height_bands
    from parallel_wan.models.vae_config import VaeConfig

    from .gloo_ranks import spawn_ranks

    cfg = dataclasses.replace(VaeConfig.wan2_1(), base_dim=args.base_dim)
    torch.manual_seed(0)
    state = {k: v.numpy() for k, v in AutoencoderKLWan(**cfg.to_diffusers()).state_dict().items()
             if not k.startswith(("encoder.", "quant_conv."))}  # the decode reads none of these
    h, w = args.height // cfg.scale_factor_spatial, args.width // cfg.scale_factor_spatial
    z = np.random.default_rng(0).standard_normal((1, cfg.z_dim, args.latent_frames, h, w)).astype(np.float32)
    frames = 1 + cfg.scale_factor_temporal * (args.latent_frames - 1)
    print(f"Wan 2.1 VAE decoder (z 16, base {args.base_dim} channels), {args.width}×{args.height}×{frames} frames "
          f"(latents {z.shape}), float32, CPU, {args.threads} threads shared by the ranks.\n")
    print("| ranks | latent rows per rank | allocated MB per rank | vs 1 process | tensors MB per rank | "
          "vs 1 process | decode s (rank 0) | frames vs 1 process |")
    print("|---|---|---|---|---|---|---|---|")
    one = None
    for n in args.ranks:
        ranks = spawn_ranks(decode_on_rank, n, cfg, state, z, threads_per_rank=max(1, args.threads // n),
                            timeout_s=3600)
        allocated, tensors = (max(r[key] for r in ranks) for key in ("peak_bytes", "tensor_bytes"))
        one = one or (allocated, tensors, ranks[0]["frames"])
        diff = np.abs(ranks[0]["frames"].astype(np.int16) - one[2].astype(np.int16))
        rows = "/".join(str(b - a) for a, b in height_bands(h, n))
        print(f"| {n} | {rows} | {allocated / 1e6:.0f} | {allocated / one[0]:.3f} | {tensors / 1e6:.0f} | "
              f"{tensors / one[1]:.3f} | {ranks[0]['seconds']:.1f} | max diff {int(diff.max())} on "
              f"{int((diff > 0).sum())} of {diff.size} values |", flush=True)

if __name__ == "__main__":
    main()
