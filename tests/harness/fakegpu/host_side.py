"""The few places of a run that fake tensors cannot follow, done for real on the host.

None of these is a GPU path of the project; each is host bookkeeping or a third-party module:
- UMT5 (text/umt5_encoder.py) is built under torch.device("meta") (which a fake mode cannot
  host) and reading data-dependent prompt lengths: the encoder runs for real on the CPU and its
  output becomes a fake tensor on the run's device (so its own .to(device) is not exercised);
  every rank encodes the same prompts with the same weights, so it runs once per process;
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

# (text encoder weights, dtype, prompts, text_len) → the host encoder's output: the same on every
# simulated rank (the encoder is host code here, not a GPU path), computed once per process.
_ENCODED: dict = {}


def host_text_encoder(mode):
    from parallel_wan.text import umt5

    real_load = umt5.TextEncoder.load.__func__

    class HostTextEncoder(umt5.TextEncoder):
        def encode(self, prompts):
            key = (*self.weights, tuple([prompts] if isinstance(prompts, str) else prompts), self.text_len)
            if key not in _ENCODED:
                with unset_fake_temporarily():
                    _ENCODED[key] = umt5.TextEncoder.encode(self, prompts)
            return mode.from_tensor(_ENCODED[key]).to(self.run_device)

    def load(cls, checkpoint, dtype="bfloat16", device="cpu"):
        with unset_fake_temporarily():
            encoder = real_load(HostTextEncoder, checkpoint, dtype, "cpu")
        encoder.run_device = torch.device(device)
        encoder.weights = (str(checkpoint.text_encoder_path), dtype)
        return encoder

    return patched({(umt5.TextEncoder, "load"): classmethod(load)})


def host_audio_encoder():
    """S2V's wav2vec2, like the text encoder, is host code here: transformers' `from_pretrained`
    builds it from real tensors, which fake tensors refuse (it is not a GPU path of ours: its
    weights and run are transformers'); its features are host float32 arrays as on a GPU run."""
    from parallel_wan.audio import wav2vec

    real_init, real_features = wav2vec.Wav2VecEncoder.__init__, wav2vec.Wav2VecEncoder.features

    def init(self, folder, dtype, device="cpu"):
        with unset_fake_temporarily():
            real_init(self, folder, dtype, "cpu")

    def features(self, samples):
        with unset_fake_temporarily():
            return real_features(self, samples)

    return patched({(wav2vec.Wav2VecEncoder, "__init__"): init, (wav2vec.Wav2VecEncoder, "features"): features})


def segment_inputs_once(recorder):
    """Animate's and S2V's per-segment inputs (the motion and face encoders, the audio tokens —
    float32 by design, the motion basis's QR on the host) are made once per segment, at its first
    step (pipeline/model_inputs.segment_inputs); what they run is tagged "segment inputs", not a
    step's work, so the loop's checks (no host copy, bf16 matmuls) hold each step's forward."""
    from parallel_wan.pipeline import model_inputs

    real = model_inputs.segment_inputs

    def segment_inputs(*args, **kwargs):
        step, recorder.phase = recorder.phase, f"segment inputs (before {recorder.phase})"
        try:
            return real(*args, **kwargs)
        finally:
            recorder.phase = step

    return patched({(model_inputs, "segment_inputs"): segment_inputs})


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


def without_vae(skip: bool):
    """A run that leaves the decode out (simulate's decode=False) on a text-to-video task, which
    has no other use for the VAE: its weights are neither read nor placed on the GPU (a third
    of a rank's load), the config still comes from the checkpoint. The VAE's load and decode on
    fake GPUs are the decoded runs' (every world size and height: test_fake_gpu_runs)."""
    if not skip:
        return contextlib.nullcontext()
    from parallel_wan.weights import loader

    def load_vae(checkpoint, dtype="float32"):
        return loader._as_checkpoint(checkpoint).vae_config, {}

    return patched({(loader, "load_vae"): load_vae})


def dtensor_type_check():
    """nn.Module._apply (FSDP2's to_empty at memory=sharded's load) asks
    torch._has_compatible_shallow_copy_type of each parameter; on DTensors that runs DTensor's
    sharding propagation, which bypasses its cache under a fake mode and decomposes the op
    afresh: 15 ms a parameter, half of such a run. The answer DTensor computes is the local
    tensors' (a bool, nothing to redistribute): asked of them directly here."""
    from torch.distributed.tensor import DTensor

    real = torch._has_compatible_shallow_copy_type

    def has_compatible_shallow_copy_type(a, b):
        if type(a) is DTensor and type(b) is DTensor:
            return real(a._local_tensor, b._local_tensor)
        return real(a, b)

    return patched({(torch, "_has_compatible_shallow_copy_type"): has_compatible_shallow_copy_type})


def host_device_mesh():
    from torch.distributed.device_mesh import DeviceMesh

    real = DeviceMesh.__dict__["from_group"].__func__

    def from_group(*args, **kwargs):
        with unset_fake_temporarily():
            return real(*args, **kwargs)

    return patched({(DeviceMesh, "from_group"): staticmethod(from_group)})


@contextlib.contextmanager
def first_block_values(metric, rank: int, recorder, cp: int = 1):
    """caching.first_block.branch_sums as the project computes it (the same fake tensor:
    device, dtype and shape are the project's), carrying `metric(rank, step, branches)` as its
    host values: what this rank's shard would give at that step. None: no values (the sums
    read as zeros, every step computes).

    Yields `foresee(member, values)` for checked_collectives: what a peer that has not run yet
    sends in the sums' all_gather at this step, where this rank sends `values` — its planted
    sums, laid out as the project lays them (under memory=sharded with CFG parallel, each dp
    half's branch in its row of a (2, 2) array, the other row zeros: backends/torch/predictor.py;
    the dp index of a rank is rank // cp). With it no rank runs twice for its peers' sums; the
    ledger still holds each part to what its member sent (a wrong forecast: a rerun)."""
    if metric is None:
        yield None
        return
    import numpy as np

    from parallel_wan.caching import first_block

    real = first_block.branch_sums
    seen = {}  # this rank's branch count, as the loop last asked for its sums

    def branch_sums(residual, reference, valid, branches, ops):
        out = real(residual, reference, valid, branches, ops)
        local = np.asarray(metric(rank, _step(recorder), branches), np.float32)
        out._fake_values = local.reshape(tuple(out.shape)).tolist()
        seen["branches"] = branches
        return out

    def foresee(member, values):
        branches = seen.get("branches")
        if branches is None or not recorder.in_loop(recorder.phase) or not _pairs(values):
            return None  # not the sums' gather (a cache's logs after the loop): not foreseen
        local = np.asarray(metric(member, _step(recorder), branches), np.float32).reshape(branches, -1)
        if len(values) == branches:
            return local.tolist()
        if len(values) == 2 * branches:  # CFG parallel in lockstep: the member's row of (2, 2)
            zero = np.zeros_like(local)
            return np.concatenate([local, zero] if member // cp == 0 else [zero, local]).tolist()
        return None

    with patched({(first_block, "branch_sums"): branch_sums}):
        yield foresee


def _pairs(values) -> bool:
    """values of a (rows, 2) tensor: the shape of the sums' gather."""
    return isinstance(values, list) and all(isinstance(v, list) and len(v) == 2 for v in values)


def _step(recorder) -> int:
    return int(recorder.phase.split()[1])  # "step i", set by the loop's progress callback


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
