"""backends/torch/ops.py on CPU: 3-D convolutions go to oneDNN's kernel directly (ATen would
pick its im2col reference kernel, `slow_conv3d`, for the small ones), the channel norm is a sum
of squares; both give torch's own results up to float rounding. Speed: benchmarks/cpu_conv3d.py."""

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from parallel_wan.backends.torch import ops


def _kernels(fn) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages() if "conv" in e.key}


# (input, weight, stride, padding): the VAE's kinds — a 3×3×3 conv on a small input (ATen's
# reference kernel), on a larger one, a strided time downsample, a height stride with padding.
CASES = [
    ((1, 32, 3, 16, 16), (32, 32, 3, 3, 3), (1, 1, 1), (0, 1, 1)),
    ((1, 8, 6, 40, 36), (3, 8, 3, 3, 3), (1, 1, 1), (0, 1, 1)),
    ((1, 8, 5, 17, 19), (12, 8, 3, 3, 3), (2, 1, 1), (0, 0, 0)),
    ((2, 8, 5, 17, 19), (12, 8, 3, 3, 3), (1, 2, 2), (1, 0, 1)),
]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("x_shape,w_shape,stride,padding", CASES)
def test_conv3d_goes_to_onednn_and_equals_atens(x_shape, w_shape, stride, padding, bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(x_shape, generator=g)
    w, b = torch.randn(w_shape, generator=g), torch.randn(w_shape[0], generator=g) if bias else None
    ours = ops.conv3d(x, w, b, stride, padding)
    reference = F.conv3d(x, w, b, stride=stride, padding=padding)
    assert ours.shape == reference.shape and ours.dtype == torch.float32
    # fp32 sums of C·27 products in another order: relative error a few ulps of the output's scale
    torch.testing.assert_close(ours, reference, rtol=0, atol=2e-6 * reference.abs().max().item())
    kernels = _kernels(lambda: ops.conv3d(x, w, b, stride, padding))
    assert "aten::mkldnn_convolution" in kernels and "aten::slow_conv3d_forward" not in kernels, kernels


def test_a_non_contiguous_input_gives_the_same_result():
    x = torch.randn(1, 8, 6, 12, 12)[:, :, 1:]  # the causal cache's concatenations and slices make such views
    w = torch.randn(8, 8, 3, 3, 3)
    torch.testing.assert_close(
        ops.conv3d(x, w, None, (1, 1, 1), (0, 1, 1)), F.conv3d(x, w, padding=(0, 1, 1)), rtol=0, atol=2e-6 * 30
    )


@pytest.mark.parametrize("case", ["1x1x1", "3x1x1", "bfloat16", "autograd", "onednn_off"])
def test_atens_own_choice_where_onednn_is_not_the_better_kernel_or_not_allowed(case, monkeypatch):
    """1×1×1 and 3×1×1 (no spatial extent: ATen is as fast), bf16, inputs that need a
    gradient, and oneDNN switched off by the user keep F.conv3d: torch's own bits."""
    x, w = torch.randn(1, 16, 3, 16, 16), torch.randn(16, 16, 3, 3, 3)
    if case == "1x1x1":
        w = torch.randn(16, 16, 1, 1, 1)
    elif case == "3x1x1":
        w = torch.randn(16, 16, 3, 1, 1)
    elif case == "bfloat16":
        x, w = x.bfloat16(), w.bfloat16()
    elif case == "autograd":
        x.requires_grad_(True)
    elif case == "onednn_off":
        monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
        assert "aten::mkldnn_convolution" not in _kernels(lambda: ops.conv3d(x, w))
    assert torch.equal(ops.conv3d(x, w), F.conv3d(x, w))


def test_meta_tensors_keep_torchs_dispatch():
    """The planner runs the decode on meta tensors: shapes only, through ATen's meta kernels."""
    out = ops.conv3d(
        torch.empty(1, 8, 3, 16, 16, device="meta"),
        torch.empty(4, 8, 3, 3, 3, device="meta"),
        None,
        (1, 1, 1),
        (0, 1, 1),
    )
    assert out.device.type == "meta" and tuple(out.shape) == (1, 4, 1, 16, 16)


@pytest.mark.parametrize("shape,axis", [((1, 8, 4, 32, 32), 1), ((2, 5, 7), 2), ((3, 16), 0)])
def test_l2_normalize_equals_f_normalize(shape, axis):
    x = torch.randn(shape) * 3
    x[0, ...] = 0  # all-zero vectors: both divide by eps, giving zeros
    # a sum of squares against vector_norm's own reduction: a few ulps of values ≤ 1
    torch.testing.assert_close(ops.l2_normalize(x, axis), F.normalize(x, dim=axis), rtol=0, atol=1e-6)
