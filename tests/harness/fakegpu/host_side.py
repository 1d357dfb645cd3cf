"""The few places of a run that fake tensors cannot follow, done for real on the host.

None of these is a GPU path of the project; each is host bookkeeping or a third-party module:
- UMT5 is transformers' module, built under torch.device("meta") (which a fake mode cannot
  host) and reading data-dependent prompt lengths: the encoder runs for real on the CPU and its
  output becomes a fake tensor on the run's device (so its own .to(device) is not exercised);
- torch's DeviceMesh (FSDP2) keeps its rank layout in a CPU tensor and looks ranks up with
  nonzero(): built outside the fake mode;
- First-Block Cache decides from activations, which fake tensors do not have: a test may give
  each rank's local sums as host values (`first_block_values`), which the harness carries
  through the group's all_gather and sum to the host read the decision is made from;
- the checkpoint's bytes: a mapped file's view is a real tensor over the file (torch.frombuffer),
  which the fake mode would convert to a fake one, tensor by tensor (milliseconds each, a third
  of a rank's load); a fake view of the stored dtype and shape is made instead — the bytes are
  never read under fake tensors either way, and the byte ranges are the CPU loader tests';
- process-wide caches (module-level dicts, lists and sets of parallel_wan) would carry the
  previous simulated rank's process group and fake tensors into the next rank: each rank
  starts from the state the package had before the first rank, as a fresh process would.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import sys

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .fake_mode import patched


def host_text_encoder(mode):
    from parallel_wan.text import umt5

    real_load = umt5.TextEncoder.load.__func__

    class HostTextEncoder(umt5.TextEncoder):
        def encode(self, prompts):
            with unset_fake_temporarily():
                out = umt5.TextEncoder.encode(self, prompts)
            return mode.from_tensor(out).to(self.run_device)

    def load(cls, checkpoint, dtype="bfloat16", device="cpu"):
        with unset_fake_temporarily():
            encoder = real_load(HostTextEncoder, checkpoint, dtype, "cpu")
        encoder.run_device = torch.device(device)
        return encoder

    return patched({(umt5.TextEncoder, "load"): classmethod(load)})


def fake_file_views():
    import math

    from torch.utils._python_dispatch import _get_current_dispatch_mode

    from parallel_wan.weights.safetensors_io import MappedFile

    real = MappedFile.view

    def view(self, info, rows=None):
        shape = list(info.shape)
        start = info.start
        if rows is not None and shape:
            start += rows[0] * math.prod(shape[1:]) * info.torch_dtype.itemsize
            shape[0] = rows[1] - rows[0]
        in_range = start + math.prod(shape) * info.torch_dtype.itemsize <= min(info.end, self.size)
        if _get_current_dispatch_mode() is None or not in_range:  # host-side reads (the text encoder), or a refusal
            return real(self, info, rows)
        return torch.empty(shape, dtype=info.torch_dtype)

    return patched({(MappedFile, "view"): view})


def host_device_mesh():
    from torch.distributed.device_mesh import DeviceMesh

    real = DeviceMesh.__dict__["from_group"].__func__

    def from_group(*args, **kwargs):
        with unset_fake_temporarily():
            return real(*args, **kwargs)

    return patched({(DeviceMesh, "from_group"): staticmethod(from_group)})


def first_block_values(metric, rank: int, recorder):
    """caching.first_block.branch_sums as the project computes it (the same fake tensor:
    device, dtype and shape are the project's), carrying `metric(rank, step, branches)` as its
    host values: what this rank's shard would give at that step. None: no values (the sums
    read as zeros, every step computes)."""
    if metric is None:
        return contextlib.nullcontext()
    import numpy as np

    from parallel_wan.caching import first_block

    real = first_block.branch_sums

    def branch_sums(residual, reference, valid, branches, ops):
        out = real(residual, reference, valid, branches, ops)
        step = int(recorder.phase.split()[1])  # "step i", set by the loop's progress callback
        local = np.asarray(metric(rank, step, branches), np.float32)
        out._fake_values = local.reshape(tuple(out.shape)).tolist()
        return out

    return patched({(first_block, "branch_sums"): branch_sums})


_CONTAINERS = (dict, list, set)


def import_torch_side() -> None:
    """Import every torch-side module of the package now, so the snapshot below sees the caches
    of modules a run would import lazily (JAX modules are left out: no JAX in a torch run)."""
    import parallel_wan

    for info in pkgutil.walk_packages(parallel_wan.__path__, "parallel_wan."):
        if ".jax" in info.name or info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional dependency (xfuser): its module holds no state then
            continue


@contextlib.contextmanager
def fresh_process_state():
    snapshot = []
    for name, module in list(sys.modules.items()):
        if name.startswith("parallel_wan") and module is not None:
            for attr, value in vars(module).items():
                if type(value) in _CONTAINERS and not attr.startswith("__"):  # not __builtins__
                    snapshot.append((value, value.copy()))
    try:
        yield
    finally:
        for live, saved in snapshot:
            live.clear()
            live.update(saved) if not isinstance(live, list) else live.extend(saved)
