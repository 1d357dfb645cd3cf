"""`attention_impl=xfuser`: xDiT's long-context (Ulysses × ring) attention instead of ours.

For users who already run xDiT and want its kernels. Two limits, both checked up front:
xfuser needs CUDA (it does not import without triton), and it does not mask padded keys, so
the token count must divide cp exactly (our own attention pads and masks any size).
"""

from __future__ import annotations

import importlib.util

import torch


def xfuser_unavailable_reason() -> str | None:
    """Why attention_impl=xfuser cannot run here, or None when it can."""
    if not torch.cuda.is_available():
        return "attention_impl=xfuser needs CUDA GPUs (xfuser does not run on CPU); use attention_impl=auto"
    if importlib.util.find_spec("xfuser") is None:
        return "attention_impl=xfuser needs xfuser: pip install 'parallel_wan[xfuser]', or use attention_impl=auto"
    return None


def make_xfuser_attention(mesh, valid_tokens: int, local_tokens: int):
    reason = xfuser_unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    cp = mesh.size("cp")
    if valid_tokens != local_tokens * cp:
        raise RuntimeError(
            f"attention_impl=xfuser cannot mask padding: {valid_tokens} tokens do not split evenly over cp={cp}; "
            "use attention_impl=auto, or a frame count/size whose token count divides cp"
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
