"""The JAX VAE on the CPU runs its convolutions in the one form XLA:CPU has a library kernel for
(issue 38, item 12), and only on the CPU.

XLA:CPU canonicalizes convolutions to channels-last 2-D (its Eigen/YNNPACK kernel's form) only
at a program's top level; inside the decode's `lax.scan` they stayed channels-first 3-D and ran
as generic loop nests (the tiny model's decode: 13–25× torch's time). `backends/jax/cpu_convs.py`
writes them channels-last 2-D itself; these tests hold that structurally — every convolution of
the compiled CPU decode and encode, scan bodies included, is in that form — and hold the numbers
(the same sums in another order) and the TPU/GPU programs' trace (unchanged). No timings.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLWan
from harness.jax_devices import rel_err
from harness.tiny_vae import TINY_VAE
from jax.sharding import Mesh

from parallel_wan.backends.jax import aot, cpu_convs, ops as jops, placement, spmd_ops, target_platform, vae_codec
from parallel_wan.backends.jax.sequence_parallel import build_mesh
from parallel_wan.backends.torch import ops as tops
from parallel_wan.models import vae, vae_shapes
from parallel_wan.weights.tree import unflatten

# XLA:CPU's LLVM level changes machine code, not the operations or their layout (test_jax_ops.py).
FAST_COMPILE = {"xla_backend_optimization_level": 0}
EIGEN_FORM = "b01f_01io->b01f"  # NHWC input, HWIO kernel, NHWC output: 2-D, channels-last


def _close(a, b, rtol=1e-5):
    assert rel_err(a, b) <= rtol, rel_err(a, b)


@pytest.mark.parametrize(
    "x_shape, w_shape, stride, padding",
    [
        ((2, 5, 6, 7, 9), (4, 5, 3, 3, 3), (1, 1, 1), (0, 1, 1)),  # causal_conv3d (time padded by the cache)
        ((1, 3, 5, 6, 6), (6, 3, 3, 1, 1), (2, 1, 1), (0, 0, 0)),  # the encoder's strided time_conv
        ((1, 4, 2, 5, 5), (3, 4, 1, 1, 1), (1, 1, 1), (0, 0, 0)),  # 1×1×1 shortcuts and quant convs
        ((1, 2, 4, 6, 6), (3, 2, 2, 3, 3), (1, 2, 2), (1, 1, 0)),  # the general contract: every stride and pad
    ],
)
def test_conv3d_equals_the_3d_convolution(x_shape, w_shape, stride, padding):
    rng = np.random.default_rng(0)
    x, w, b = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in (x_shape, w_shape, w_shape[:1]))
    _close(cpu_convs.conv3d(x, w, b, stride, padding), jops.conv3d(x, w, b, stride, padding))


@pytest.mark.parametrize("stride, padding, kernel", [((1, 1), (1, 1), 3), ((2, 2), (0, 0), 3), ((1, 1), (0, 0), 1)])
def test_conv2d_equals_the_channels_first_convolution(stride, padding, kernel):
    rng = np.random.default_rng(1)
    x, w, b = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((3, 4, 9, 8), (5, 4, kernel, kernel), (5,)))
    _close(cpu_convs.conv2d(x, w, b, stride, padding), jops.conv2d(x, w, b, stride, padding))


def _params(cfg):
    torch.manual_seed(3)
    model = AutoencoderKLWan(**cfg.to_diffusers()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # norm gains away from 1, biases away from 0
    return unflatten(model.state_dict())


@pytest.fixture(scope="module", params=list(TINY_VAE))
def tiny_vae(request):
    cfg = TINY_VAE[request.param]
    params = _params(cfg)
    placed = placement.place(params, build_mesh(devices=jax.devices()[:1]), "float32")
    # 3 latent frames: the first chunk, then a scan of two; 5 video frames for the encoder's scan
    z = torch.randn(1, cfg.z_dim, 3, 4, 4)
    video = torch.rand(1, 3, 5, 4 * cfg.spatial_stride, 4 * cfg.spatial_stride) * 2 - 1
    return cfg, params, placed, z, video


def _convolutions(hlo: str) -> list[tuple[str, bool]]:
    """(dim_labels, inside the scan's body) of every convolution in a compiled program."""
    lines = [line for line in hlo.splitlines() if " convolution(" in line]
    return [(re.search(r"dim_labels=([^,\s]+)", line).group(1), "/while/body/" in line) for line in lines]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_cpu_decode_and_encode_take_xla_cpus_kernel_form_and_match_torch(tiny_vae):
    cfg, params, placed, z, video = tiny_vae
    assert target_platform.current() == "cpu"
    # the programs the backend runs: the decode's and the encode's scans over chunks
    decode = jax.jit(lambda p, x: vae_codec.decode_video(p, x, cfg)).lower(placed, z.numpy()).compile(FAST_COMPILE)
    encoder = vae_codec.video_encoder(cfg, jax.sharding.SingleDeviceSharding(jax.devices()[0]))
    encode = encoder.lower(placed, video.numpy()).compile(FAST_COMPILE)
    for name, program in (("decode", decode), ("encode", encode)):
        convs = _convolutions(program.as_text())
        assert any(in_scan for _, in_scan in convs), name  # the scan is there, with convolutions in it
        # before issue 38: the scan body's 3-D convs "bf012_oi012->bf012", its 2-D "bf01_oi01->bf01"
        assert {form for form, _ in convs} == {EIGEN_FORM}, (name, sorted(set(convs)))

    # the same sums in another order: the project's fp32 bound, as test_jax_ops.py's VAE check
    with torch.no_grad():
        _close(decode(placed, z.numpy()), vae.decode(params, z, tops, cfg).numpy())
        _close(encode(placed, video.numpy()), vae.encode(params, video, tops, cfg).numpy())


@pytest.mark.parametrize("platform", ["tpu", "gpu", "cpu"])
def test_only_the_cpu_trace_changes(platform, monkeypatch):
    """The decode as traced for TPU (what aot.py compiles for a v5p slice) and GPU is the one
    traced with ops' own convolutions, equation for equation; the CPU's is not."""
    cfg = TINY_VAE["wan2.2"]
    params = aot.vae_params(vae_shapes.param_shapes(cfg), Mesh(np.asarray(jax.devices()[:1]), ("height",)), False)
    z = jax.ShapeDtypeStruct((1, cfg.z_dim, 2, 4, 4), jnp.float32)

    def trace() -> str:
        with target_platform.compiling_for(platform):
            return str(jax.jit(vae_codec.decode_program(cfg)).trace(params, z).jaxpr)

    traced = trace()
    monkeypatch.setattr(spmd_ops, "conv3d", jops.conv3d)
    monkeypatch.setattr(spmd_ops, "conv2d", jops.conv2d)
    with_ops_convs = trace()
    assert (traced == with_ops_convs) == (platform != "cpu")
