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

`--meta`: the real dims, which no 2-core CPU decodes in useful time — the Wan 2.1 VAE (base 96,
z 16) at 832×480×81 frames and the Wan 2.2 VAE (z 48, decoder 256) at 1280×704×81 — on the
meta device: the unchanged decode (models/vae.py through HeightBandOps) on shape-only tensors
under parallel_wan.measure.live_bytes.LiveBytes, for one rank and for one band of a 2-, 4- and 8-way
split with the communication dropped (the receive buffers are still made). Per rank: the peak
of op outputs (activations, time cache, halo rows, gathered keys/values, the float video, its
uint8 frames and, on rank 0, the received bands and the joined video); weights listed apart.
`--validate` first checks the meta peak against real decodes where those are cheap (base 8,
3 latent frames): the same band on real tensors and a real split over gloo processes.

    python -m benchmarks.vae_decode --meta --validate                 # ≈ 2.5 min
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

    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.config import MeshSpec
    from parallel_wan.launch import Launch
    from parallel_wan.weights import tree

    backend = start_torch_backend(
        "cpu", MeshSpec(name=f"cp{world}", cp=world, ulysses=world), Launch(rank, world, rank, "benchmark")
    )
    decoder = backend.video_decoder(tree.unflatten({k: torch.from_numpy(v) for k, v in state.items()}), cfg)
    latents = torch.from_numpy(z)
    with (
        torch.inference_mode(),
        tp.profile(activities=[tp.ProfilerActivity.CPU], profile_memory=True) as prof,
        _live_tensor_peak() as tensors,
    ):
        t0 = time.perf_counter()
        videos = decoder(latents)
        seconds = time.perf_counter() - t0
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    allocated = np.cumsum([nbytes for _, nbytes in events])
    return {
        "peak_bytes": int(allocated.max()) if len(allocated) else 0,
        "tensor_bytes": tensors.peak,
        "seconds": seconds,
        "frames": videos[0] if videos else None,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--latent-frames", type=int, default=2, help="2 → 5 video frames: the first chunk, then one of 4")
    p.add_argument("--base-dim", type=int, default=8, help="decoder base channels (the real Wan 2.1 VAE: 96)")
    p.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4])
    p.add_argument("--threads", type=int, default=2, help="CPU threads shared by all ranks of a run")
    p.add_argument(
        "--meta",
        action="store_true",
        help="real dims on the meta device: Wan 2.1 VAE at 832×480×81, Wan 2.2 VAE at 1280×704×81, "
        "ranks 1 2 4 8 (the size options are ignored)",
    )
    p.add_argument("--validate", action="store_true", help="with --meta: first the meta peak against a real decode")
    p.add_argument("--skip-wan22", action="store_true", help="with --meta: only the Wan 2.1 VAE")
    args = p.parse_args(argv)
    if args.meta:
        from parallel_wan.models.vae_config import VaeConfig

        if args.validate:
            validate_meta()
        meta_table(VaeConfig.wan2_1(), "Wan 2.1 VAE (z 16, base 96; the A14B models' VAE)", 480, 832, 21, [1, 2, 4, 8])
        if not args.skip_wan22:
            meta_table(
                VaeConfig.wan2_2(),
                "Wan 2.2 VAE (z 48, base 160 / decoder 256; TI2V-5B's VAE)",
                704,
                1280,
                21,
                [1, 2, 4, 8],
            )
        return
    import torch
    from diffusers import AutoencoderKLWan

    from parallel_wan.backends.torch.vae_bands import height_bands
    from parallel_wan.models.vae_config import VaeConfig
    from processes.gloo_ranks import spawn_ranks

    cfg = dataclasses.replace(VaeConfig.wan2_1(), base_dim=args.base_dim)
    torch.manual_seed(0)
    state = {
        k: v.numpy()
        for k, v in AutoencoderKLWan(**cfg.to_diffusers()).state_dict().items()
        if not k.startswith(("encoder.", "quant_conv."))
    }  # the decode reads none of these
    h, w = args.height // cfg.scale_factor_spatial, args.width // cfg.scale_factor_spatial
    z = np.random.default_rng(0).standard_normal((1, cfg.z_dim, args.latent_frames, h, w)).astype(np.float32)
    frames = 1 + cfg.scale_factor_temporal * (args.latent_frames - 1)
    print(
        f"Wan 2.1 VAE decoder (z 16, base {args.base_dim} channels), {args.width}×{args.height}×{frames} frames "
        f"(latents {z.shape}), float32, CPU, {args.threads} threads shared by the ranks.\n"
    )
    print(
        "| ranks | latent rows per rank | allocated MB per rank | vs 1 process | tensors MB per rank | "
        "vs 1 process | decode s (rank 0) | frames vs 1 process |"
    )
    print("|---|---|---|---|---|---|---|---|")
    one = None
    for n in args.ranks:
        ranks = spawn_ranks(
            decode_on_rank, n, cfg, state, z, threads_per_rank=max(1, args.threads // n), timeout_s=3600
        )
        allocated, tensors = (max(r[key] for r in ranks) for key in ("peak_bytes", "tensor_bytes"))
        one = one or (allocated, tensors, ranks[0]["frames"])
        diff = np.abs(ranks[0]["frames"].astype(np.int16) - one[2].astype(np.int16))
        rows = "/".join(str(b - a) for a, b in height_bands(h, n))
        print(
            f"| {n} | {rows} | {allocated / 1e6:.0f} | {allocated / one[0]:.3f} | {tensors / 1e6:.0f} | "
            f"{tensors / one[1]:.3f} | {ranks[0]['seconds']:.1f} | max diff {int(diff.max())} on "
            f"{int((diff > 0).sum())} of {diff.size} values |",
            flush=True,
        )


# ------------------------------------------------------------------------------ --meta
# The real dims (base 96) at 480p × 81 frames take hours on this CPU, so `--meta` runs the
# unchanged decode on meta tensors (shapes only, no arithmetic) under LiveBytes: the same ops
# return the same shapes, so the live bytes of their outputs are what a real decode holds.
# A band runs as one rank of a split whose neighbours are not there: HeightBandOps still makes
# its halo rows, receive buffers and gathered keys/values (that code allocates them before it
# communicates), and `NullCollectives` only drop the sends and receives. `--validate`
# checks the method where a real decode is cheap.


def band_decode_peak(params, cfg, latents, ranks: int, index: int) -> dict:
    """What rank `index` of a `ranks`-way height split holds during EagerVideoDecoder's decode
    of `latents` (meta or real): the LiveBytes peak over slicing its band, denormalising,
    decoding, making uint8 frames and — on rank 0 — receiving the other bands and joining them
    (as _gather_rows_to_rank0 does: the received bands, then their concatenation). `frames`:
    the uint8 bytes the rank holds at the end."""
    import torch

    from parallel_wan.backends.torch import ops, vae_decode
    from parallel_wan.backends.torch.collectives import NullCollectives
    from parallel_wan.measure.live_bytes import LiveBytes
    from parallel_wan.models import vae
    from parallel_wan.report.frames import to_uint8_frames

    bands = vae_decode.height_bands(latents.shape[3], ranks)
    start, stop = bands[index]
    band_ops = ops
    if ranks > 1:
        band_ops = vae_decode.HeightBandOps([b - a for a, b in bands], index, NullCollectives(index, ranks))
    scale = cfg.scale_factor_spatial
    with torch.inference_mode(), LiveBytes() as live:
        z = vae.denormalize_latents(latents[:, :, :, start:stop], cfg, ops)
        frames = to_uint8_frames(vae.decode(params, z, band_ops, cfg), ops).contiguous()
        del z
        if ranks > 1 and index == 0:
            t, _, w, c = frames.shape
            received = [
                torch.empty((t, (b - a) * scale, w, c), dtype=frames.dtype, device=frames.device) for a, b in bands[1:]
            ]
            frames = torch.cat([frames, *received], dim=1)
            del received
        held = frames.untyped_storage().nbytes()
    return {"peak": live.peak, "frames": held}


def meta_params(cfg, device: str):
    """The decoder's params tree (diffusers names), random on `device` ("meta": shapes only)."""
    import torch
    from diffusers import AutoencoderKLWan

    from parallel_wan.weights import tree

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoencoderKLWan(**cfg.to_diffusers())
    state = {k: v.detach() for k, v in model.state_dict().items() if not k.startswith(("encoder.", "quant_conv."))}
    return tree.unflatten(state), sum(v.numel() * v.element_size() for v in state.values())


def meta_table(cfg, label: str, height: int, width: int, latent_frames: int, ranks: list[int]) -> None:
    import torch

    from parallel_wan.backends.torch.vae_bands import height_bands

    params, weight_bytes = meta_params(cfg, "meta")
    h, w = height // cfg.scale_factor_spatial, width // cfg.scale_factor_spatial
    latents = torch.empty((1, cfg.z_dim, latent_frames, h, w), device="meta")
    frames = 1 + cfg.scale_factor_temporal * (latent_frames - 1)
    print(
        f"\n{label}: {width}×{height}×{frames} frames (latents {tuple(latents.shape)}), float32, "
        f"weights {weight_bytes / 1e9:.3f} GB (decoder + post_quant_conv, on every rank), measured on meta.\n"
    )
    print(
        "| ranks | latent rows per rank | rank 0 peak GB (uint8 video incl.) | vs 1 rank | "
        "other ranks' largest peak GB | vs 1 rank | uint8 frames held GB (rank 0 / others) | "
        "weights + peak GB, worst rank |"
    )
    print("|---|---|---|---|---|---|---|---|")
    one = None
    for n in ranks:
        bands = [b - a for a, b in height_bands(h, n)]
        # Bands differ by at most one row and come larger first: index 1 is the largest of the
        # ranks other than 0.
        results = [band_decode_peak(params, cfg, latents, n, i) for i in ([0, 1] if n > 1 else [0])]
        first, other = results[0], (results[1] if n > 1 else None)
        one = one or first["peak"]
        worst = max(r["peak"] for r in results)
        print(
            f"| {n} | {'/'.join(map(str, sorted(set(bands), reverse=True)))} | {first['peak'] / 1e9:.3f} | "
            f"{first['peak'] / one:.3f} | {(other['peak'] / 1e9) if other else float('nan'):.3f} | "
            f"{(other['peak'] / one) if other else float('nan'):.3f} | {first['frames'] / 1e9:.3f} / "
            f"{(other['frames'] / 1e9) if other else 0:.3f} | {(weight_bytes + worst) / 1e9:.3f} |",
            flush=True,
        )


def validate_meta(base_dim: int = 8, latent_frames: int = 3, h: int = 24, w: int = 32) -> None:
    """The meta peak against real ones, same code, small enough to decode for real: the band on
    real CPU tensors with the exchanges dropped, and a real split over gloo processes
    (decode_on_rank's own counter, real halo exchanges and gathers)."""
    import numpy as np
    import torch

    from parallel_wan.models.vae_config import VaeConfig
    from parallel_wan.weights import tree
    from processes.gloo_ranks import spawn_ranks

    cfg = dataclasses.replace(VaeConfig.wan2_1(), base_dim=base_dim)
    real_params, _ = meta_params(cfg, "cpu")
    meta_p, _ = meta_params(cfg, "meta")
    z = np.random.default_rng(0).standard_normal((1, cfg.z_dim, latent_frames, h, w)).astype(np.float32)
    state = {k: v.numpy() for k, v in tree.flatten(real_params).items()}
    print(f"validation: Wan 2.1 VAE base {base_dim}, latents {z.shape}: LiveBytes peak bytes per rank")
    print("| ranks | meta (this method) | real tensors, exchanges dropped | real split over gloo processes |")
    print("|---|---|---|---|")
    for n in (1, 2, 4):
        on_meta = [band_decode_peak(meta_p, cfg, torch.from_numpy(z).to("meta"), n, i)["peak"] for i in range(n)]
        real = [band_decode_peak(real_params, cfg, torch.from_numpy(z), n, i)["peak"] for i in range(n)]
        gloo = [
            r["tensor_bytes"] for r in spawn_ranks(decode_on_rank, n, cfg, state, z, threads_per_rank=1, timeout_s=600)
        ]
        print(f"| {n} | {on_meta} | {real} | {gloo} |", flush=True)


if __name__ == "__main__":
    main()
