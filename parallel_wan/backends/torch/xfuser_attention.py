"""`sequence_parallel=xfuser`: xDiT's long-context (Ulysses × ring) attention instead of ours
(sequence_parallel.py) — its own sequence parallelism and its own kernels, so attention_impl
does not apply. `attention_impl=xfuser`, its name before issue 39, still selects it.

For users who already run xDiT and want its kernels. Two limits, both checked up front:
xfuser needs CUDA (it does not import without triton), and it does not mask padded keys, so
the token count must divide cp exactly (our own attention pads and masks any size).
"""

from __future__ import annotations

import importlib.util

import torch

# The setting that chose xfuser → the value that means our own attention instead.
OURS = {"sequence_parallel": "ours", "attention_impl": "auto"}


def xfuser_unavailable_reason(set_by: str = "sequence_parallel") -> str | None:
    """Why xfuser cannot run here, or None when it can; said in the words of the setting the
    user chose it with (`set_by`: sequence_parallel, or the old attention_impl)."""
    fix = f"use {set_by}={OURS[set_by]}"
    if not torch.cuda.is_available():
        return f"{set_by}=xfuser needs CUDA GPUs (xfuser does not run on CPU); {fix}"
    if importlib.util.find_spec("xfuser") is None:
        return f"{set_by}=xfuser needs xfuser: pip install 'parallel_wan[xfuser]', or {fix}"
    return None


def make_xfuser_attention(mesh, valid_tokens: int, local_tokens: int):
    reason = xfuser_unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    cp = mesh.size("cp")
    if valid_tokens != local_tokens * cp:
        raise RuntimeError(
            f"sequence_parallel=xfuser cannot mask padding: {valid_tokens} tokens do not split evenly over cp={cp}; "
            "use sequence_parallel=ours, or a frame count/size whose token count divides cp"
        )
    from xfuser.core.distributed import init_distributed_environment, initialize_model_parallel, parallel_state
    from xfuser.core.long_ctx_attention import xFuserLongContextAttention

    if not parallel_state.model_parallel_is_initialized():
        init_distributed_environment(rank=torch.distributed.get_rank(), world_size=torch.distributed.get_world_size())
        # xfuser orders sequence-parallel ranks innermost with Ulysses inside the ring, like our mesh.
        initialize_model_parallel(
            classifier_free_guidance_degree=mesh.size("dp"),
            sequence_parallel_degree=cp,
            ulysses_degree=mesh.size("ulysses"),
            ring_degree=mesh.size("ring"),
        )
    attn = xFuserLongContextAttention()

    def attention(q, k, v):
        return attn(None, query=q, key=k, value=v)

    return attention
