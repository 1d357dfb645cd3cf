"""The Wan VAE on JAX devices: whole videos as one compiled program each, the causal time
cache carried through a `lax.scan` over latent frames (vae.decode_chunk returns it as a dict of
fixed shapes from the first chunk on), uint8 frames made on the device.

Decode is split across devices by height: the latents enter sharded along their height axis
and XLA's SPMD partitioner runs every convolution on its rows, exchanging halo rows with the
neighbouring devices (collective permutes) and gathering where an op needs the whole frame
(the middle block's attention, at latent resolution). It is the same computation, partitioned,
not an approximation by overlapping tiles: frames equal the one-device decode up to float
rounding (measured: at most 1 level apart), and each device's temporaries shrink almost in
proportion to the split (benchmarks/jax_vae_decode.py: 26.2 MB on one device, 4.1 MB each on
8, with the channels-first convolutions TPU/GPU programs trace; 30.1 and 5.3 MB with the CPU's
own, cpu_convs.py through spmd_ops). The split uses the largest number of devices that divides
the latent height (all of them when it divides).

Encode (a video-to-video source, I2V's [image, black frames…], TI2V's first frame) is split
the same way: the video enters sharded by height over the devices that divide its latent rows
(backend.vae_encode), the mean leaves replicated.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ...models import vae
from ...report.frames import to_uint8_frames
from ...report.words import counted
from ..contract import VideoDecoder
from . import spmd_ops as ops  # partitioned by XLA, not shard_map: no Pallas kernels


def decode_video(params, z, cfg):
    """De-normalised (1, z_dim, T, h, w) latents → (1, 3, T', H, W) video in [-1, 1]: the first
    latent frame alone (it makes one video frame), then a scan over the rest."""
    first, cache = vae.decode_chunk(params, z[:, :, :1], None, ops, cfg)
    if z.shape[2] == 1:
        return first

    def chunk(cache, z_frame):
        out, cache = vae.decode_chunk(params, z_frame, cache, ops, cfg)
        return cache, out

    rest = jnp.moveaxis(z[:, :, 1:], 2, 0)[:, :, :, None]  # (T-1, B, z_dim, 1, h, w)
    _, outs = lax.scan(chunk, cache, rest)  # (T-1, B, 3, stride, H, W)
    t, b, c, f, h, w = outs.shape
    outs = jnp.reshape(jnp.transpose(outs, (1, 2, 0, 3, 4, 5)), (b, c, t * f, h, w))
    return jnp.concatenate([first, outs], axis=2)


def decode_frames(params, z, cfg):
    """De-normalised latents → (T', H, W, 3) uint8 frames, made on the device."""
    return to_uint8_frames(decode_video(params, z, cfg), ops)


def decode_program(cfg):
    def vae_decode_video(params, z):
        return decode_frames(params, vae.denormalize_latents(z, cfg, ops), cfg)

    return vae_decode_video


def _decode_with_tail(cfg, tail: int):
    """Normalised latents → (uint8 frames, the last `tail` decoded frames as floats): Animate's."""

    def decode_with_tail(params, z):
        video = decode_video(params, vae.denormalize_latents(z, cfg, ops), cfg)
        return to_uint8_frames(video, ops), video[:, :, -tail:]

    return decode_with_tail


def height_split(latent_height: int, devices: int) -> int:
    """How many devices share the decode: the largest count ≤ devices dividing the height."""
    return max(d for d in range(1, devices + 1) if latent_height % d == 0)


_DECODERS: dict = {}  # (VAE config, latent shape, devices) → jitted decode, shared by generations
_TAIL_DECODERS: dict = {}  # … and Animate's, which also returns the last frames as floats


class JaxVideoDecoder(VideoDecoder):
    """`decode(latents)` → [(T, H, W, 3) uint8 per video] on the host of every process."""

    def __init__(self, params, cfg, mesh: Mesh, to_host):
        self.params, self.cfg, self.to_host = params, cfg, to_host
        self.devices = list(mesh.devices.flat)
        self._programs: dict = {}

    def _program(self, latent_shape):
        key = tuple(latent_shape)
        if key not in self._programs:
            split = height_split(latent_shape[3], len(self.devices))
            mesh = Mesh(np.asarray(self.devices[:split]), ("height",))
            z_sharding = NamedSharding(mesh, P(None, None, None, "height", None))
            frames_sharding = NamedSharding(mesh, P(None, "height", None, None))
            # Whole on every device of the split (gathered if FSDP-sharded); named after the
            # split's own mesh so every generation on these devices shares one program.
            params = jax.device_put(self.params, NamedSharding(mesh, P()))
            cache_key = (repr(self.cfg), key, tuple(d.id for d in self.devices[:split]))
            if cache_key not in _DECODERS:
                _DECODERS[cache_key] = jax.jit(decode_program(self.cfg), out_shardings=frames_sharding)
            program = _DECODERS[cache_key]
            self._programs[key] = {
                "program": program,
                "params": params,
                "z": z_sharding,
                "split": split,
                "compiled": None,
            }
        return self._programs[key]

    def compile(self, latent_shape) -> dict:
        entry = self._program(latent_shape)
        t0 = time.perf_counter()
        z = jax.ShapeDtypeStruct(tuple(latent_shape), jnp.float32, sharding=entry["z"])
        entry["compiled"] = entry["program"].lower(entry["params"], z).compile()
        return {f"vae_decode[{counted(entry['split'], 'device')} by height]": time.perf_counter() - t0}

    def frames_and_tail(self, latents, tail: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The uint8 videos and each one's last `tail` decoded frames as float32 (Animate's next
        segment's condition), from one decode: the program returns both."""
        videos, tails = [], []
        for row in range(latents.shape[0]):
            z = latents[row : row + 1]
            entry = self._program(z.shape)
            key = (repr(self.cfg), tuple(z.shape), tail, entry["split"])
            if key not in _TAIL_DECODERS:  # closes over the config alone: the cache keeps no decoder alive
                _TAIL_DECODERS[key] = jax.jit(_decode_with_tail(self.cfg, tail))
            frames, last = _TAIL_DECODERS[key](entry["params"], jax.device_put(z, entry["z"]))
            videos.append(self.to_host(frames).astype(np.uint8))
            tails.append(self.to_host(last).astype(np.float32))
        return videos, tails

    def __call__(self, latents) -> list[np.ndarray]:
        videos = []
        for row in range(latents.shape[0]):
            z = latents[row : row + 1]
            entry = self._program(z.shape)
            program = entry["compiled"] or entry["program"]
            frames = program(entry["params"], jax.device_put(z, entry["z"]))
            videos.append(self.to_host(frames).astype(np.uint8))
        return videos


def video_encoder(cfg, sharding: NamedSharding):
    """A jitted `encode(params, video)`: (1, 3, 1 + 4k, H, W) in [-1, 1] → posterior mean
    latents, as vae.encode — the first frame alone, then a scan over chunks of
    `temporal_stride` frames; `sharding`: the mean's (replicated over the devices the video's
    height bands sit on)."""
    stride = cfg.temporal_stride

    def vae_encode_video(params, video):
        mean, cache = vae.encode_chunk(params, video[:, :, :1], None, ops, cfg)
        b, c, t, h, w = video.shape
        if t == 1:
            return mean

        def chunk(cache, frames):
            out, cache = vae.encode_chunk(params, frames, cache, ops, cfg)
            return cache, out

        rest = jnp.moveaxis(jnp.reshape(video[:, :, 1:], (b, c, (t - 1) // stride, stride, h, w)), 2, 0)
        _, means = lax.scan(chunk, cache, rest)  # (k, B, z_dim, 1, h', w'): one latent frame per chunk
        return jnp.concatenate([mean, jnp.moveaxis(means[:, :, :, 0], 0, 2)], axis=2)

    return jax.jit(vae_encode_video, out_shardings=sharding)
