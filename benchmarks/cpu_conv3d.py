"""The VAE on CPU: `backends/torch/ops.py`'s 3-D convolutions (oneDNN's kernel, called
directly) and channel norm (a sum of squares) against torch's own dispatch, as diffusers'
AutoencoderKLWan runs them, in one process:

    python -m benchmarks.cpu_conv3d                   # one thread, tiny VAE, 128×128×17
    python -m benchmarks.cpu_conv3d --threads 2 --base-dim 32

Rows: each distinct 3-D convolution shape of one decode, timed both ways (`F.conv3d`, which
ATen sends to its im2col reference kernel `slow_conv3d` when N·C·T·H ≤ 20,480, against
`ops.conv3d`); then the whole decode — `models.vae.decode` with the torch ops against
diffusers' `AutoencoderKLWan.decode` on the same weights and latents — with the largest
difference of the uint8 frames. Best of `--repeats`. Times are this machine's, shared with
whatever else runs: the ratios are the result.
"""

from __future__ import annotations

import argparse
import dataclasses
import time


def _best(fn, repeats: int) -> float:
    fn()  # warm-up: oneDNN builds its kernel for a shape on first use
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _conv_shapes(params, z, cfg) -> list[tuple]:
    """Every distinct (input shape, weight shape, stride, padding) the decode's 3-D convs see."""
    import torch

    from parallel_wan.backends.torch import ops
    from parallel_wan.models import vae

    seen: dict = {}

    class Recording:
        def __getattr__(self, name):
            return getattr(ops, name)

        def conv3d(self, x, w, b=None, stride=(1, 1, 1), padding=(0, 0, 0)):
            key = (tuple(x.shape), tuple(w.shape), tuple(stride), tuple(padding))
            seen[key] = seen.get(key, 0) + 1
            return ops.conv3d(x, w, b, stride, padding)

    with torch.inference_mode():
        vae.decode(params, z, Recording(), cfg)
    return [(*key, count) for key, count in seen.items()]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--height", type=int, default=128)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--frames", type=int, default=17)
    parser.add_argument("--base-dim", type=int, default=8, help="decoder width (the tiny model's 8; Wan 2.1's 96)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    import torch.nn.functional as F
    from diffusers import AutoencoderKLWan

    from parallel_wan.backends.torch import ops
    from parallel_wan.models import vae
    from parallel_wan.models.vae_config import VaeConfig
    from parallel_wan.report.frames import to_uint8_frames
    from parallel_wan.weights.tree import unflatten

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = dataclasses.replace(VaeConfig.wan2_1(), base_dim=args.base_dim, decoder_base_dim=None)
    model = AutoencoderKLWan(**cfg.to_diffusers()).eval()
    params = unflatten({k: v.float() for k, v in model.state_dict().items()})
    s = cfg.scale_factor_spatial
    z = torch.randn(1, cfg.z_dim, (args.frames - 1) // cfg.scale_factor_temporal + 1, args.height // s, args.width // s)
    print(
        f"Wan 2.1 VAE decoder, base width {args.base_dim}, {args.width}×{args.height}×{args.frames} "
        f"(latents {tuple(z.shape)}), {args.threads} thread(s), best of {args.repeats}"
    )

    print(
        f"\n{'input':>22} {'weight':>18} {'stride':>9} {'calls':>5} {'F.conv3d ms':>11} {'ops.conv3d ms':>13} "
        f"{'ratio':>6}"
    )
    total_torch = total_ops = 0.0
    with torch.inference_mode():
        for x_shape, w_shape, stride, padding, calls in _conv_shapes(params, z, cfg):
            x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(w_shape[0])
            t_torch = _best(lambda: F.conv3d(x, w, b, stride=stride, padding=padding), args.repeats)
            t_ops = _best(lambda: ops.conv3d(x, w, b, stride, padding), args.repeats)
            total_torch += calls * t_torch
            total_ops += calls * t_ops
            print(
                f"{str(x_shape):>22} {str(w_shape):>18} {str(stride):>9} {calls:>5} {t_torch * 1e3:11.2f} "
                f"{t_ops * 1e3:13.2f} {t_torch / t_ops:6.1f}"
            )
        print(
            f"{'all 3-D convs of one decode':>56} {total_torch * 1e3:11.1f} {total_ops * 1e3:13.1f} "
            f"{total_torch / total_ops:6.1f}"
        )

        ours, theirs = {}, {}
        t_ours = _best(
            lambda: ours.setdefault("v", to_uint8_frames(vae.decode(params, z, ops, cfg), ops)), args.repeats
        )
        t_theirs = _best(lambda: theirs.setdefault("v", model.decode(z).sample), args.repeats)
    ours_frames = ours["v"].numpy().astype(np.int16)
    theirs_frames = to_uint8_frames(theirs["v"], ops).numpy().astype(np.int16)
    print(
        f"\nwhole decode: models.vae.decode (torch ops) {t_ours:.3f} s, diffusers AutoencoderKLWan.decode "
        f"{t_theirs:.3f} s: {t_theirs / t_ours:.1f}× faster; uint8 frames differ by at most "
        f"{np.abs(ours_frames - theirs_frames).max()} ({int((ours_frames != theirs_frames).sum())} of "
        f"{ours_frames.size} values)"
    )


if __name__ == "__main__":
    main()
