"""Attention over one block of keys that also returns the log-sum-exp of the scores.

Sequence parallelism computes a query block's attention against key blocks held apart (ring
steps) and merges the partial results exactly; that merge needs each partial's log-sum-exp,
which `F.scaled_dot_product_attention` does not return. So this calls the SDPA kernels that do:
the CPU flash kernel on CPU; flash-attn 3 (Hopper), cuDNN (first on Hopper and Blackwell),
flash-attn 2 or PyTorch's flash / memory-efficient kernels on CUDA; a plain fp32 formula when
none of them takes the inputs.

`attention_impl` (the run's setting) narrows the choice to one family: sdpa (PyTorch's flash
and memory-efficient kernels; the CPU flash kernel on CPU), flash (the flash-attn 3 package on
Hopper, else flash-attn 2), cudnn, sage (SageAttention: sage_attention.py), or auto — every
exact kernel, fastest first (`_candidates`). attention_impl.py says before a run whether its
choice can run here.

Layout is the model's: q (B, S, H, D), k and v (B, L, H, D). The log-sum-exp comes back as
(B, S, H) in float32 (float64 for float64 inputs), the dtype merges are done in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)

Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]
# `attention_with_lse(q, k, v, valid_keys=…, scale=…)` or a stand-in with its signature: sequence
# parallelism is handed one, so the planner can run the real code with a kernel that only makes
# the outputs' buffers.
LseAttention = Callable[..., tuple[torch.Tensor, torch.Tensor]]


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

    Padding sits at the end of the global sequence, so the padded keys of any block are its
    tail: slicing them off masks them exactly and costs less than a mask. A block with no
    valid key contributes nothing: out = 0 and lse = -inf (no kernel runs; the CPU flash
    kernel dies with SIGFPE on zero keys).

    kernel: a name from `KERNELS` to force one (tests); None picks the fastest that works among
    attention_impl `impl`'s kernels (`IMPL_KERNELS`).
    Returns (out (B, S, H, D) in q's dtype, lse (B, S, H) in `lse_dtype(q.dtype)`).
    """
    if valid_keys is not None:
        if valid_keys < 0:
            raise ValueError(f"valid_keys={valid_keys} is negative; pass the count of real (unpadded) keys, ≥ 0")
        if valid_keys < k.shape[1]:
            k, v = k[:, :valid_keys], v[:, :valid_keys]
    b, s, h, _ = q.shape
    if k.shape[1] == 0 or s == 0:
        out = q.new_zeros((b, s, h, v.shape[-1]))
        return out, torch.full((b, s, h), float("-inf"), dtype=lse_dtype(q.dtype), device=q.device)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if kernel is not None:
        return KERNELS[kernel](q, k, v, scale)
    return _run_best(q, k, v, scale, impl)


# ---------------------------------------------------------------- kernels: (B, L, H, D) in and out
def _bhld(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)


def _lse_bsh(lse: torch.Tensor, b: int, h: int, s: int, dtype: torch.dtype) -> torch.Tensor:
    # Kernels disagree on the lse shape: (B, H, S), (B, H, S, 1) for cuDNN, and the efficient
    # kernel has padded S to a multiple of 32 in some releases. Normalise to (B, S, H).
    return lse.reshape(b, h, -1)[:, :, :s].transpose(1, 2).to(lse_dtype(dtype))


def cpu_flash(q, k, v, scale):
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(_bhld(q), _bhld(k), _bhld(v), scale=scale)
    return _bhld(out), _lse_bsh(lse, q.shape[0], q.shape[2], q.shape[1], q.dtype)


def cuda_flash(q, k, v, scale):
    out, lse, *_ = torch.ops.aten._scaled_dot_product_flash_attention(_bhld(q), _bhld(k), _bhld(v), scale=scale)
    return _bhld(out), _lse_bsh(lse, q.shape[0], q.shape[2], q.shape[1], q.dtype)


def cuda_cudnn(q, k, v, scale):
    out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(
        _bhld(q), _bhld(k), _bhld(v), None, True, scale=scale
    )
    return _bhld(out), _lse_bsh(lse, q.shape[0], q.shape[2], q.shape[1], q.dtype)


def cuda_efficient(q, k, v, scale):
    out, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(
        _bhld(q), _bhld(k), _bhld(v), None, True, scale=scale
    )
    return _bhld(out), _lse_bsh(lse, q.shape[0], q.shape[2], q.shape[1], q.dtype)


def flash_attn_package(q, k, v, scale):
    from flash_attn import flash_attn_func  # optional dependency; checked in `_candidates`

    # flash-attn takes (B, L, H, D) directly and returns lse (B, H, S) in float32.
    out, lse, _ = flash_attn_func(q, k, v, softmax_scale=scale, return_attn_probs=True)
    return out, _lse_bsh(lse, q.shape[0], q.shape[2], q.shape[1], q.dtype)


def flash_attn3_package(q, k, v, scale):
    from flash_attn_interface import flash_attn_func  # flash-attn 3 (Hopper build); checked in `_candidates`

    try:
        result = flash_attn_func(q, k, v, softmax_scale=scale, return_attn_probs=True)
    except TypeError:  # FA3 betas before `return_attn_probs` always return (out, lse)
        result = flash_attn_func(q, k, v, softmax_scale=scale)
    out, lse = result[0], result[1]
    return out, _lse_bsh(lse, q.shape[0], q.shape[2], q.shape[1], q.dtype)


def math_kernel(q, k, v, scale):
    """The formula, in at least float32: runs anywhere, on any dtype, slowly."""
    dt = lse_dtype(q.dtype)
    scores = torch.einsum("bshd,blhd->bhsl", q.to(dt), k.to(dt)) * scale
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("bhsl,blhd->bshd", torch.exp(scores - lse[..., None]), v.to(dt))
    return out.to(q.dtype), lse.transpose(1, 2)


def sage(q, k, v, scale):
    # imported here: sage_attention imports triton, only when sage is asked for
    from .sage_attention import sage_attention

    return sage_attention(q, k, v, scale)


KERNELS: dict[str, Kernel] = {
    "cpu_flash": cpu_flash,
    "flash_attn3": flash_attn3_package,
    "flash_attn": flash_attn_package,
    "cuda_flash": cuda_flash,
    "cuda_cudnn": cuda_cudnn,
    "cuda_efficient": cuda_efficient,
    "math": math_kernel,
    "sage": sage,
}

# attention_impl → the kernels it may run, in the order tried (those the device cannot run are
# left out by `_candidates`). auto: `_candidates`' table of every exact kernel. Sage is never
# auto's: its int8 scores change the numbers (about 1e-2 relative), so a user asks for it.
IMPL_KERNELS: dict[str, tuple[str, ...]] = {
    "sdpa": ("cuda_flash", "cuda_efficient", "cpu_flash", "math"),
    "flash": ("flash_attn3", "flash_attn"),
    "cudnn": ("cuda_cudnn",),
    "sage": ("sage",),
}


# ---------------------------------------------------------------- choosing one
_HALF = (torch.float16, torch.bfloat16)


def _has_flash_attn() -> bool:
    try:
        import flash_attn  # noqa: F401
    except Exception:  # ImportError, or a wheel built for another torch/CUDA
        return False
    return True


def _has_flash_attn3() -> bool:
    try:
        import flash_attn_interface  # noqa: F401
    except Exception:
        return False
    return True


def _candidates(q: torch.Tensor, impl: str = "auto") -> list[str]:
    """Kernels worth trying for these inputs, fastest first. Each kernel's own checks are the
    final word (sm version, head size, alignment); the first that runs is remembered.
    `preferred` (see `prefer_kernel`) goes first when set (auto only)."""
    if impl != "auto":
        return _impl_candidates(q, impl)
    d = q.shape[-1]
    if q.device.type == "cpu":
        names = ["cpu_flash", "math"] if q.dtype in (torch.float32, torch.float64, *_HALF) else ["math"]
        return _with_preferred(names)
    if q.device.type != "cuda":
        return ["math"]
    names = []
    if q.dtype in _HALF and d % 8 == 0 and d <= 256:
        major = torch.cuda.get_device_capability(q.device)[0]
        if major == 9 and _has_flash_attn3():
            names.append("flash_attn3")  # Hopper only: FA3 uses sm_90 wgmma/TMA
        if major >= 9:
            # Hopper and Blackwell (sm_100, where neither flash-attn build runs): cuDNN's fused
            # attention uses the new tensor-core instructions; PyTorch's flash kernel is FA2.
            names.append("cuda_cudnn")
        if _has_flash_attn():
            names.append("flash_attn")
        names.append("cuda_flash")
        if major < 9:
            names.append("cuda_cudnn")
    if q.dtype in (torch.float32, *_HALF):
        names.append("cuda_efficient")
    return _with_preferred(names + ["math"])


def _impl_candidates(q: torch.Tensor, impl: str) -> list[str]:
    """attention_impl `impl`'s kernels this device can run, in IMPL_KERNELS' order."""
    if q.device.type == "cuda":
        hopper_fa3 = _has_flash_attn3() and torch.cuda.get_device_capability(q.device)[0] == 9
        skip = {"cpu_flash", "math"} | (set() if hopper_fa3 else {"flash_attn3"})
    else:
        skip = {name for name in KERNELS if name.startswith("cuda_")} | {"flash_attn3"}
    return [name for name in IMPL_KERNELS[impl] if name not in skip]


preferred: str | None = None


def prefer_kernel(name: str | None) -> None:
    """Try kernel `name` first from now on (benchmarks compare kernels; None restores the
    default order). Forgets earlier choices so the next call chooses again."""
    global preferred
    if name is not None and name not in KERNELS:
        raise ValueError(f"attention kernel {name!r} is unknown; choose from {', '.join(KERNELS)}")
    preferred = name
    _chosen.clear()


def chosen_kernels(impl: str = "auto") -> dict[tuple, str]:
    """The kernel each (device type, dtype, head_dim) ended up with under attention_impl `impl`:
    for reports (the sidecar's "attention", the benchmarks)."""
    return {key[1:]: name for key, name in _chosen.items() if key[0] == impl}


def _with_preferred(names: list[str]) -> list[str]:
    if preferred is None:
        return names
    return [preferred] + [n for n in names if n != preferred]


_chosen: dict[tuple, str] = {}


def _run_best(q, k, v, scale, impl="auto"):
    key = (impl, q.device.type, q.dtype, q.shape[-1])
    name = _chosen.get(key)
    if name is not None:
        try:
            return KERNELS[name](q, k, v, scale)
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, NotImplementedError):
            # Some kernels also refuse particular sequence lengths: choose again for these.
            del _chosen[key]
    failures = []
    for name in _candidates(q, impl):
        try:
            result = KERNELS[name](q, k, v, scale)
        except torch.OutOfMemoryError:
            raise  # a slower kernel would need more memory, not less
        except (RuntimeError, NotImplementedError, ImportError) as exc:
            # Unsupported shape/dtype/GPU: the kernels check on the host before launching.
            failures.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            continue
        if failures:
            log.warning("attention kernel %s used for %s; faster ones refused: %s", name, key, "; ".join(failures))
        log.info(
            "attention_impl=%s → %s (%s, %s, head_dim %d)",
            impl,
            name,
            q.device.type,
            str(q.dtype).removeprefix("torch."),
            q.shape[-1],
        )
        _chosen[key] = name
        return result
    raise RuntimeError(
        f"attention_impl={impl}: no attention kernel runs on {key[1:]}: "
        + "; ".join(failures)
        + ("" if impl == "auto" else "; use attention_impl=auto")
    )
