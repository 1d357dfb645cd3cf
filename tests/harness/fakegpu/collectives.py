"""torch.distributed as one simulated rank sees it: torch's built-in "fake" process group (every
collective returns at once, nothing moves) plus the checks the fake group does not make.

`checked_collectives(ledger, rank, runtime)` wraps the collectives at the torch.distributed
level (the project's collectives call these, whatever object carries them) to
- refuse what NCCL refuses: a tensor that is not on this rank's current GPU (a CPU receive
  buffer, a tensor on another rank's GPU), a dtype NCCL has no type for (int16, uint16/32/64),
  sizes that do not add up;
- record each call in the ledger for the cross-rank comparison;
- hand a receiver what the fake group cannot: rank 0's broadcast_object_list payloads, the
  values of small int tensors a peer sent (shape headers read with .tolist()), and each
  member's values in an all_gather of tensors that carry host values (a step cache's sums;
  `Ledger.gathered`).
`nccl_as_fake` replaces init_process_group: a request for NCCL is checked as torch checks it
(device_id a cuda device with an index, the current one) and joins the fake group.
"""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.distributed as dist

from .errors import CollectiveError, FakeCudaError
from .fake_mode import patched
from .ledger import Call, Ledger

# torch's map from dtypes to NCCL's (c10d/NCCLUtils.hpp, torch 2.13): any other dtype is
# "Unsupported data type for NCCL process group". Complex tensors are viewed as real pairs by
# torch.distributed before they reach the process group.
NCCL_DTYPES = {
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.float8_e5m2,
    torch.float8_e4m3fn,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.complex64,
    torch.complex128,
}


def _meta(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), str(t.dtype).replace("torch.", ""), str(t.device))


def checked_collectives(ledger: Ledger, rank: int, runtime, nccl: bool = True, foresee=None):
    """A context manager: dist.* wrapped for `rank` (call after ledger.start_rank(rank));
    `foresee(member, values)`: what a member that has not run yet sends in a valued all_gather
    where this rank sends `values` (Ledger.gathered), or None."""
    # FSDP2 (torch 2.13) gathers and reduces with all_gather_single / reduce_scatter_single,
    # the same NCCL collectives as the *_tensor forms: checked and recorded under those names.
    real = {
        name: getattr(dist, name)
        for name in (
            "all_to_all_single",
            "all_gather",
            "all_gather_into_tensor",
            "all_gather_single",
            "reduce_scatter_tensor",
            "reduce_scatter_single",
            "all_reduce",
            "broadcast",
            "batch_isend_irecv",
            "barrier",
        )
    }
    replay = iter(copy.deepcopy(ledger.objects)) if rank != 0 else None

    def ranks_of(group) -> tuple[int, ...]:
        return tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(dist.get_world_size()))

    def record(op, group, tensors, peer=None, values=None, received=None):
        if nccl:
            want = torch.device("cuda", runtime.current_device())
            for t in tensors:
                if t.device != want:
                    raise CollectiveError(f"{op}: tensor on {t.device}; NCCL on this rank needs {want}")
                if t.dtype not in NCCL_DTYPES:
                    raise CollectiveError(f"{op}: {t.dtype} tensor; NCCL has no such data type")
        ledger.calls[rank].append(Call(op, ranks_of(group), tuple(_meta(t) for t in tensors), peer, values, received))

    def size_of(group) -> int:
        return len(ranks_of(group))

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
        n = size_of(group)
        if (
            output_split_sizes is None
            and input_split_sizes is None
            and (output.numel() != input.numel() or input.shape[0] % n)
        ):
            raise CollectiveError(
                f"all_to_all_single: input {tuple(input.shape)}, output {tuple(output.shape)}, {n} ranks"
            )
        record("all_to_all_single", group, [input, output])
        return real["all_to_all_single"](output, input, output_split_sizes, input_split_sizes, group, async_op)

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        if len(tensor_list) != size_of(group) or any(
            t.shape != tensor.shape or t.dtype != tensor.dtype for t in tensor_list
        ):
            raise CollectiveError(
                f"all_gather: {len(tensor_list)} outputs for {size_of(group)} ranks, "
                "or their shapes/dtypes differ from the input's"
            )
        values = getattr(tensor, "_fake_values", None)
        ahead = None if foresee is None else (lambda member: foresee(member, values))
        received = None if values is None else ledger.gathered(rank, ranks_of(group), values, ahead)
        out = real["all_gather"](tensor_list, tensor, group, async_op)
        for part, got in zip(tensor_list, received or ()):
            if got is not None:
                part._fake_values = got
        record("all_gather", group, [tensor, *tensor_list], values=values, received=received)
        return out

    def gather_into(name):
        def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
            if (
                output_tensor.numel() != size_of(group) * input_tensor.numel()
                or output_tensor.dtype != input_tensor.dtype
            ):
                raise CollectiveError(f"{name}: the output is not world × input")
            record("all_gather_into_tensor", group, [input_tensor, output_tensor])
            return real[name](output_tensor, input_tensor, group, async_op)

        return all_gather_into_tensor

    def scatter_from(name):
        def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
            if input.numel() != size_of(group) * output.numel() or output.dtype != input.dtype:
                raise CollectiveError(f"{name}: the input is not world × output")
            record("reduce_scatter_tensor", group, [input, output])
            return real[name](output, input, op, group, async_op)

        return reduce_scatter_tensor

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        record("all_reduce", group, [tensor])
        return real["all_reduce"](tensor, op, group, async_op)

    def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
        record("broadcast", group, [tensor], src)
        return real["broadcast"](tensor, src, group, async_op, group_src)

    def barrier(group=None, async_op=False, device_ids=None):
        record("barrier", group, [])
        return None

    def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
        # the fake group moves no bytes: a receiver would read an uninitialised size
        record("broadcast_object_list", group, [], src)
        if rank == (src or 0):
            ledger.objects.append(copy.deepcopy(object_list))
            return
        try:
            object_list[:] = next(replay)
        except StopIteration:
            raise CollectiveError(
                "broadcast_object_list: rank 0 broadcast fewer objects (simulate rank 0 first)"
            ) from None

    def batch_isend_irecv(p2p_op_list):
        # isend/irecv themselves cannot be wrapped: P2POp compares against dist's own functions
        for p in p2p_op_list:
            kind = "send" if p.op.__name__ == "isend" else "recv"
            record(kind, None, [p.tensor], p.peer)
        return real["batch_isend_irecv"](p2p_op_list)

    def send(tensor, dst=None, group=None, tag=0, group_dst=None):
        record("send", None, [tensor], dst, getattr(tensor, "_fake_values", None))

    def recv(tensor, src=None, group=None, tag=0, group_src=None):
        record("recv", None, [tensor], src)
        # the k-th receive from src (batched ones included) matches src's k-th send to here
        k = sum(1 for c in ledger.calls[rank] if c.op == "recv" and c.peer == src) - 1
        sent = ledger.sent(src, rank)  # known when the peer has run already
        if k < len(sent) and sent[k].values is not None:
            tensor._fake_values = sent[k].values
        elif k >= len(sent):  # src has not run yet: this rank runs again once it has
            ledger.early.add(rank)
        return src

    table = {
        (dist, name): fn
        for name, fn in dict(
            all_to_all_single=all_to_all_single,
            all_gather=all_gather,
            all_gather_into_tensor=gather_into("all_gather_into_tensor"),
            all_gather_single=gather_into("all_gather_single"),
            reduce_scatter_tensor=scatter_from("reduce_scatter_tensor"),
            reduce_scatter_single=scatter_from("reduce_scatter_single"),
            all_reduce=all_reduce,
            broadcast=broadcast,
            barrier=barrier,
            broadcast_object_list=broadcast_object_list,
            batch_isend_irecv=batch_isend_irecv,
            send=send,
            recv=recv,
        ).items()
    }
    return patched(table)


@contextlib.contextmanager
def nccl_as_fake(rank: int, world: int, runtime):
    """init_process_group → the fake group for (rank, world); its requests are kept in the
    yielded list as (backend, device_id)."""
    real = dist.init_process_group
    requests = []

    def init_process_group(backend=None, **kw):
        device = kw.get("device_id")
        requests.append((backend, None if device is None else str(device)))
        if device is not None and (torch.device(device).type == "cpu" or torch.device(device).index is None):
            raise ValueError("init_process_group device_id parameter must be an accelerator with an index")
        if backend == "nccl":
            if device is None or torch.device(device).type != "cuda":
                raise FakeCudaError(f"an NCCL process group with device_id={device!r}: NCCL needs this rank's GPU")
            if torch.device(device).index != runtime.current_device():
                raise FakeCudaError(
                    f"NCCL device_id={device} but the current device is cuda:{runtime.current_device()}"
                )
        kw = {k: v for k, v in kw.items() if k not in ("device_id", "init_method", "rank", "world_size")}
        return real("fake", rank=rank, world_size=world, **kw)

    with patched({(dist, "init_process_group"): init_process_group}):
        try:
            yield requests
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
