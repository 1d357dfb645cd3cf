"""Count the bytes this rank sends, by wrapping the torch.distributed calls the code makes.

The project calls collectives through the module (`dist.all_to_all_single(...)`), so replacing
the attribute on `torch.distributed` for the duration of a `with SentBytes():` block sees every
call while the real collective still runs (the data must still arrive: the code under test
computes with it). What counts as "sent by this rank":

- all_to_all_single: every input chunk except the one addressed to this rank itself;
- batch_isend_irecv: the tensors of its isend ops;
- all_gather: (W − 1) × the local tensor — every rank must receive the W − 1 others' tensors,
  so with balanced load each sends that much (gloo's ring all_gather sends exactly that);
- broadcast: (W − 1) × the tensor on the source, 0 elsewhere (what a flat broadcast sends;
  a tree spreads the same total over more ranks).

Any other collective seen is recorded by name with its tensor's bytes, so a new call in the
code shows up in the report instead of silently escaping the count.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist

COUNTED = ("all_to_all_single", "batch_isend_irecv", "all_gather", "broadcast")
# isend/irecv are not wrapped: P2POp accepts only the real functions (it checks identity), and
# the code sends point-to-point only through batch_isend_irecv.
NOTICED = ("all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor", "send", "all_to_all",
           "gather", "scatter", "reduce", "broadcast_object_list")


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _all_to_all_single_sent(output, input, output_split_sizes=None, input_split_sizes=None, group=None, **_):
    me, world = dist.get_rank(group), dist.get_world_size(group)
    row = nbytes(input[0]) if input.shape[0] else 0
    splits = input_split_sizes or [input.shape[0] // world] * world
    return sum(rows * row for dst, rows in enumerate(splits) if dst != me)


def _p2p_sent(p2p_op_list, **_):
    return sum(nbytes(op.tensor) for op in p2p_op_list if getattr(op.op, "__name__", "") == "isend")


def _all_gather_sent(tensor_list, tensor, group=None, **_):
    return (dist.get_world_size(group) - 1) * nbytes(tensor)


def _broadcast_sent(tensor, src=0, group=None, **_):
    # src is a global rank in torch's API, so it is compared with the global rank.
    return (dist.get_world_size(group) - 1) * nbytes(tensor) if dist.get_rank() == src else 0


_SENT = {
    "all_to_all_single": _all_to_all_single_sent,
    "batch_isend_irecv": _p2p_sent,
    "all_gather": _all_gather_sent,
    "broadcast": _broadcast_sent,
}


def _first_tensor_bytes(args, kwargs) -> int:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return nbytes(value)
    return 0


class SentBytes:
    """`with SentBytes() as sent: ...` → `sent.by_call` {name: bytes}, `sent.calls` {name: count},
    `sent.total` (bytes of the counted collectives), `sent.unexpected` (names seen outside COUNTED)."""

    def __init__(self):
        self.by_call: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self._saved: dict[str, object] = {}

    @property
    def total(self) -> int:
        return sum(v for k, v in self.by_call.items() if k in COUNTED)

    @property
    def unexpected(self) -> list[str]:
        return sorted(k for k in self.calls if k not in COUNTED)

    def __enter__(self) -> "SentBytes":
        for name in COUNTED + NOTICED:
            real = getattr(dist, name, None)
            if real is not None:
                self._saved[name] = real
                setattr(dist, name, self._wrap(name, real))
        return self

    def __exit__(self, *exc) -> None:
        for name, real in self._saved.items():
            setattr(dist, name, real)
        self._saved.clear()

    def _wrap(self, name, real):
        count = _SENT.get(name)

        def counted(*args, **kwargs):
            self.calls[name] += 1
            self.by_call[name] += count(*args, **kwargs) if count else _first_tensor_bytes(args, kwargs)
            return real(*args, **kwargs)

        counted.__name__ = name
        return counted
