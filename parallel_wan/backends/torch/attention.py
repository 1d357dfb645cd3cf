"""Attention over one block of keys that also returns the log-sum-exp of the scores.

Sequence parallelism computes a query block's attention against key blocks held apart (ring
steps) and merges the partial results exactly; that merge needs each partial's log-sum-exp,
which `F.scaled_dot_product_attention` does not return. So this runs the registered kernels
that do (kernels/: PyTorch's CPU flash kernel, flash-attn 3 and 2, cuDNN, PyTorch's flash and
memory-efficient kernels, SageAttention, the plain formula).

`attention_impl` (the run's setting) picks among them: auto — every exact kernel, fastest first
for the device (attention_choice.py) — or one setting's kernels (sdpa, flash, cudnn, sage, fp8).
A `KernelChoice` makes the choice for one backend and keeps it; attention_impl.py says before a
run whether a setting can run here.

Layout is the model's: q (B, S, H, D), k and v (B, L, H, D). The log-sum-exp comes back as
(B, S, H) in float32 (float64 for float64 inputs), the dtype merges are done in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from . import kernels as registry
from .attention_choice import candidates, device_facts, dtype_name

log = logging.getLogger(__name__)

# `attention_with_lse(q, k, v, valid_keys=…, scale=…)`, a `KernelChoice`, or a stand-in with
# their signature: sequence parallelism is handed one, so the planner can run the real code with
# a kernel that only makes the outputs' buffers.
LseAttention = Callable[..., tuple[torch.Tensor, torch.Tensor]]
# what auto on one CPU device without padding runs: PyTorch's SDPA, which chooses itself
TORCH_SDPA = "torch_sdpa"


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype log-sum-exps and merged partial outputs are kept in: at least float32."""
    return torch.promote_types(dtype, torch.float32)


def attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    valid_keys: int | None = None,
    scale: float | None = None,
    kernel: str | None = None,
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of q over the first `valid_keys` keys of k/v (all when None).

    kernel: a registered kernel's name to force one (tests, benchmarks); None chooses among
    attention_impl `impl`'s kernels for this call alone (a backend keeps its choice: KernelChoice).
    Returns (out (B, S, H, D) in q's dtype, lse (B, S, H) in `lse_dtype(q.dtype)`).
    """
    if kernel is None:
        return KernelChoice(impl)(q, k, v, valid_keys, scale)
    run = registry.kernel(kernel).run
    return _over_valid_keys(q, k, v, valid_keys, scale, lambda q, k, v, s: run(q, k, v, s))


def _over_valid_keys(q, k, v, valid_keys, scale, attend):
    """`attend(q, k, v, scale)` over the valid keys. Padding sits at the end of the global
    sequence, so the padded keys of any block are its tail: slicing them off masks them exactly
    and costs less than a mask. A block with no valid key contributes nothing: out = 0 and
    lse = -inf (no kernel runs; the CPU flash kernel dies with SIGFPE on zero keys)."""
    if valid_keys is not None:
        if valid_keys < 0:
            raise ValueError(f"valid_keys={valid_keys} is negative; pass the count of real (unpadded) keys, ≥ 0")
        if valid_keys < k.shape[1]:
            k, v = k[:, :valid_keys], v[:, :valid_keys]
    b, s, h, _ = q.shape
    if k.shape[1] == 0 or s == 0:
        out = q.new_zeros((b, s, h, v.shape[-1]))
        return out, torch.full((b, s, h), float("-inf"), dtype=lse_dtype(q.dtype), device=q.device)
    return attend(q, k, v, q.shape[-1] ** -0.5 if scale is None else float(scale))


class KernelChoice:
    """attention_impl=`setting`'s local kernel for one backend (the doctor, a benchmark): for
    each new (device type, dtype, head_dim) it tries the setting's kernels fastest first and
    keeps the first that runs, which the run's sidecar then reads (`chosen`). Called as
    `attention_with_lse` (without `kernel`/`impl`)."""

    def __init__(self, setting: str = "auto"):
        if setting != "auto" and setting not in registry.settings():
            raise ValueError(
                f"attention_impl={setting!r} names no attention kernel; choose from auto, "
                f"{', '.join(registry.settings())}"
            )
        self.setting = setting
        self.preferred: str | None = None
        self._chosen: dict[tuple, str] = {}

    def __call__(self, q, k, v, valid_keys: int | None = None, scale: float | None = None):
        return _over_valid_keys(q, k, v, valid_keys, scale, self._run_best)

    def prefer(self, name: str | None) -> None:
        """Try kernel `name` first from now on (benchmarks compare kernels; None restores the
        default order); auto only. Forgets earlier choices so the next call chooses again."""
        if name is not None:
            registry.kernel(name)  # an unknown name is refused, naming the kernels
        self.preferred = name
        self._chosen.clear()

    def chosen(self) -> dict[tuple, str]:
        """The kernel each (device type, dtype, head_dim) ended up with: for reports (the
        sidecar's "attention", the doctor, the benchmarks)."""
        return dict(self._chosen)

    def one_device(self) -> Callable | None:
        """The attention for one device's whole, unpadded sequence, where no lse is needed, or
        None when it is the setting's kernels as for any key block. auto leaves it to PyTorch's
        SDPA off CUDA — exactly the one-device path, recorded as torch_sdpa — and runs its table's
        kernel on CUDA (cuDNN first on Hopper and Blackwell), which SDPA's dispatch does not put
        first."""
        if self.setting != "auto":
            return None
        from . import ops

        def attend(q, k, v):
            return self(q, k, v)[0] if q.is_cuda else ops.attention(q, k, v)

        return attend

    def candidates(self, q: torch.Tensor) -> list[str]:
        """The kernels tried for inputs like `q`, in order."""
        facts = device_facts(q.device)
        return candidates(self.setting, facts, dtype_name(q.dtype), q.shape[-1], self.preferred)

    def _run_best(self, q, k, v, scale):
        key = (q.device.type, q.dtype, q.shape[-1])
        name = self._chosen.get(key)
        if name is not None:
            try:
                return registry.kernel(name).run(q, k, v, scale)
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, NotImplementedError):
                # Some kernels also refuse particular sequence lengths: choose again for these.
                del self._chosen[key]
        failures = []
        for name in self.candidates(q):
            try:
                result = registry.kernel(name).run(q, k, v, scale)
            except torch.OutOfMemoryError:
                raise  # a slower kernel would need more memory, not less
            except (RuntimeError, NotImplementedError, ImportError) as exc:
                # Unsupported shape/dtype/GPU: the kernels check on the host before launching.
                failures.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
                continue
            if failures:
                log.warning(
                    "attention kernel %s used for %s; faster ones refused: %s",
                    name,
                    (self.setting, *key),
                    "; ".join(failures),
                )
            log.info(
                "attention_impl=%s → %s (%s, %s, head_dim %d)",
                self.setting,
                name,
                q.device.type,
                dtype_name(q.dtype),
                q.shape[-1],
            )
            self._chosen[key] = name
            return result
        raise RuntimeError(
            f"attention_impl={self.setting}: no attention kernel runs on {key}: "
            + "; ".join(failures)
            + ("" if self.setting == "auto" else "; use attention_impl=auto")
        )
