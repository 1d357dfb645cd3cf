"""A one-line Triton kernel that runs fp8_kernel's float32 → e4m3 cast over a vector, so a test
can compare it with torch's cast. Imported only after TRITON_INTERPRET is set (a Triton kernel
is interpreted or compiled from its definition on)."""

import triton
import triton.language as tl

from parallel_wan.backends.torch.fp8_kernel import _e4m3


@triton.jit
def cast(X, Out, N: tl.constexpr, ROUND_BY_HAND: tl.constexpr):
    at = tl.arange(0, N)
    tl.store(Out + at, _e4m3(tl.load(X + at), ROUND_BY_HAND).to(tl.float32))
