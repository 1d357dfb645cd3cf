"""fake_gpus(): the process behaves as if it had `runtime.devices` CUDA GPUs, with no data.

torch's FakeTensorMode propagates shapes, dtypes and devices without computing, and raises on
a cpu/cuda or cuda:0/cuda:1 mix. Around it, for a CPU-only build (torch 2.13):
- the C++ guard (guard.py) and the torch.cuda stand-ins (cuda_runtime.py);
- every fake mode (ours, Dynamo's, Inductor's) is told there is no device to run on, so it
  never constant-folds `torch.tensor(..., device="cuda")` by running a real copy (it asks
  torch.cuda.is_available(), which the stand-ins answer True);
- `aten.to.*` is decomposed before dispatch: under inference_mode (the whole generation runs
  in it) `as_tensor(np, device="cuda")` reaches the mode as aten.to, which torch's own
  no-device guard does not cover, and the real copy would run;
- matmul, conv and attention get the one-dtype / one-device check the CUDA kernels make and the
  meta functions skip (bf16 activations times an fp32 weight would pass silently otherwise);
- host reads (.numpy(), .item(), .tolist()) make the real call's checks, are recorded, and
  return zeros; small int tensors made from host values (shape headers) keep their values, and
  so does a tensor a test gave host values (`_fake_values`) through copies, additions and cat —
  a rank's First-Block Cache sums, which the group adds and reads on the host;
- ThreadPoolExecutor work runs inline: dispatch modes are thread-local, a worker thread would
  run real kernels on the absent GPU.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from . import guard
from .cuda_runtime import FakeCudaRuntime
from .errors import FakeCudaError
from .recorder import ATTENTION_OPS, MATMUL_OPS, Recorder, Transfer

_TO = {torch.ops.aten.to.device, torch.ops.aten.to.dtype_layout, torch.ops.aten.to.other, torch.ops.aten.to.dtype}
_ONE_DTYPE_OPS = MATMUL_OPS | set(ATTENTION_OPS) | {"aten.scaled_dot_product_attention", "aten.linear", "aten.matmul"}
_VALUE_KEEPING = {
    "aten._to_copy.default",
    "aten.detach.default",
    "aten.clone.default",
    "aten.alias.default",
    "aten.lift_fresh.default",
}
_VALUE_ADDING = {"aten.add.Tensor", "aten.add.Scalar"}
_VALUE_JOINING = {"aten.cat.default"}
_NUMPY = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


def _check_one_dtype(func, args) -> None:
    dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()}
    if len(dtypes) > 1:
        raise FakeCudaError(f"{func}: inputs in {sorted(map(str, dtypes))}; the CUDA kernel needs one dtype")
    devices = {a.device for a in args if isinstance(a, torch.Tensor) and a.dim() > 0}
    if len(devices) > 1:  # the fake convolution takes its device from the input alone
        raise FakeCudaError(f"{func}: inputs on {sorted(map(str, devices))}; the kernel needs one device")


# Every op of a run passes through the dispatch below (tens of thousands per test): the names
# and labels it needs are made once per op, device and dtype, not once per call.
_NAMES: dict = {}  # op overload → (its name, its packet's name): "aten.add.Tensor", "aten.add"
_DEVICES: dict = {}  # torch.device → "cuda:0"
_DTYPES: dict = {}  # torch.dtype → "bfloat16"


def _names(func) -> tuple[str, str]:
    names = _NAMES.get(func)
    if names is None:
        names = _NAMES[func] = (str(func), str(func.overloadpacket))
    return names


def _device(t) -> str:
    device = t.device
    return _DEVICES.get(device) or _DEVICES.setdefault(device, str(device))


def _dtype(t) -> str:
    dtype = t.dtype
    return _DTYPES.get(dtype) or _DTYPES.setdefault(dtype, str(dtype).replace("torch.", ""))


def _keep_values(func, args, out, full: str) -> None:
    if isinstance(out, torch.Tensor) and full in _VALUE_JOINING:
        _join_values(args, out)
        return
    if (
        isinstance(out, torch.Tensor)
        and full == "aten.zeros_like.default"
        and out.dtype in _NUMPY
        and getattr(args[0], "_fake_values", None) is not None
    ):
        out._fake_values = np.zeros(tuple(out.shape), _NUMPY[out.dtype]).tolist()  # zeros of a valued tensor
        return
    if not isinstance(out, torch.Tensor) or not args or not isinstance(args[0], torch.Tensor):
        return
    src = args[0]
    if getattr(src, "_fake_pinned", False) and func.is_view:
        out._fake_pinned = True  # a view of pinned memory is pinned memory
    if full in _VALUE_ADDING:
        _add_values(args, out)
        return
    if full not in _VALUE_KEEPING:
        return
    values = getattr(src, "_fake_values", None)
    if values is None and getattr(src, "constant", None) is not None:
        src = src.constant
    if (
        values is None
        and not isinstance(src, FakeTensor)
        and src.device.type == "cpu"
        and src.numel() <= 16
        and not src.is_floating_point()
    ):
        values = src.tolist()
    if values is not None:
        out._fake_values = values


def _add_values(args, out) -> None:
    """a + b where every tensor operand carries host values: the sum's values, computed in
    the output's dtype (float64 sums of float32 parts add as a device would)."""
    if out.dtype not in _NUMPY or any(
        isinstance(a, torch.Tensor) and getattr(a, "_fake_values", None) is None for a in args[:2]
    ):
        return
    dtype = _NUMPY[out.dtype]
    terms = [np.asarray(a._fake_values if isinstance(a, torch.Tensor) else a, dtype) for a in args[:2]]
    out._fake_values = np.broadcast_to(terms[0] + terms[1], tuple(out.shape)).astype(dtype).tolist()


def _join_values(args, out) -> None:
    """cat of tensors that all carry host values (a step cache's logs, met over dp)."""
    parts, dim = args[0], args[1] if len(args) > 1 else 0
    if out.dtype in _NUMPY and all(getattr(p, "_fake_values", None) is not None for p in parts):
        out._fake_values = np.concatenate([_host_values(p, _NUMPY[out.dtype]) for p in parts], axis=dim).tolist()


def _host_values(t, dtype):
    """The values a test gave tensor `t` (np array of `dtype`), or None."""
    values = getattr(t, "_fake_values", None)
    return None if values is None else np.asarray(values, dtype).reshape(tuple(t.shape))


def _transfer(name, args, kwargs, out, recorder: Recorder) -> None:
    if name == "aten._to_copy" and isinstance(out, torch.Tensor):
        src, dst, non_blocking = args[0], out, bool(kwargs.get("non_blocking", False))
    elif name == "aten.copy_":
        dst, src = args[0], args[1]
        non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
    else:
        return
    if not isinstance(src, torch.Tensor) or src.device.type == dst.device.type:
        return
    host = src if src.device.type == "cpu" else dst
    recorder.transfers.append(
        Transfer(
            recorder.phase,
            str(src.device),
            str(dst.device),
            tuple(src.shape),
            bool(getattr(host, "_fake_pinned", False)),
            non_blocking,
        )
    )


@contextlib.contextmanager
def _patched_fake_tensor_mode():
    real_dispatch = FakeTensorMode.dispatch
    real_avoid = FakeTensorMode.__dict__["avoid_device_init"]

    def dispatch(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _TO:
            with self:
                return func.decompose(*args, **kwargs)
        full, name = _names(func)
        if name in _ONE_DTYPE_OPS:
            _check_one_dtype(func, args)
        # Only the program's own calls are recorded: the mode computes some outputs by running
        # a decomposition (linear → addmm upcast to fp32 → ...), which re-enters here, once:
        # later calls with the same inputs hit its cache.
        depth = getattr(self, "_depth", 0)
        self._depth = depth + 1
        try:
            out = real_dispatch(self, func, types, args, kwargs)
        finally:
            self._depth = depth
        _keep_values(func, args, out, full)
        recorder = getattr(self, "recorder", None)
        if recorder is not None and depth == 0:
            _transfer(name, args, kwargs, out, recorder)
            first = out[0] if isinstance(out, (tuple, list)) and out else out
            if name in MATMUL_OPS and isinstance(first, torch.Tensor):
                weight = [a for a in args if isinstance(a, torch.Tensor) and a.dim() >= 2][-1:]
                shape = tuple(weight[0].shape) if weight else ()
                if name in ("aten.mm", "aten.addmm"):  # linear's weight arrives transposed
                    shape = shape[::-1]
                recorder.matmuls[(recorder.phase, _dtype(first), shape)] += 1
            if isinstance(first, torch.Tensor):
                recorder.ops[(name, _device(first), _dtype(first), recorder.phase)] += 1
        return out

    FakeTensorMode.dispatch = dispatch
    FakeTensorMode.avoid_device_init = property(lambda self: True)
    try:
        yield
    finally:
        FakeTensorMode.dispatch = real_dispatch
        FakeTensorMode.avoid_device_init = real_avoid


def _host_read_patches(recorder: Recorder) -> dict:
    real_numpy, real_item, real_tolist = torch.Tensor.numpy, torch.Tensor.item, torch.Tensor.tolist

    def numpy(self, *, force=False):
        if not isinstance(self, FakeTensor):
            return real_numpy(self, force=force)
        if self.device.type != "cpu":
            raise FakeCudaError(
                f"can't convert {self.device} device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first."
            )
        if self.dtype not in _NUMPY:
            raise FakeCudaError(f"Got unsupported ScalarType {str(self.dtype).replace('torch.', '').capitalize()}")
        recorder.host_reads.append((recorder.phase, f"numpy() {tuple(self.shape)}", str(self.device)))
        values = _host_values(self, _NUMPY[self.dtype])
        return np.zeros(tuple(self.shape), dtype=_NUMPY[self.dtype]) if values is None else values

    def item(self):
        if not isinstance(self, FakeTensor):
            return real_item(self)
        if self.numel() != 1:
            raise FakeCudaError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        recorder.host_reads.append((recorder.phase, "item()", str(self.device)))
        return False if self.dtype == torch.bool else (0.0 if self.is_floating_point() else 0)

    def tolist(self):
        if not isinstance(self, FakeTensor):
            return real_tolist(self)
        recorder.host_reads.append((recorder.phase, f"tolist() {tuple(self.shape)}", str(self.device)))
        values = getattr(self, "_fake_values", None)
        if values is not None:
            return list(values)
        dtype = bool if self.dtype == torch.bool else (np.float64 if self.is_floating_point() else np.int64)
        return np.zeros(tuple(self.shape), dtype=dtype).tolist()

    # FakeTensor defines its own tolist (through item()), so it is replaced as well
    return {
        (torch.Tensor, "numpy"): numpy,
        (torch.Tensor, "item"): item,
        (torch.Tensor, "tolist"): tolist,
        (FakeTensor, "tolist"): tolist,
    }


@contextlib.contextmanager
def _inline_thread_pools():
    from concurrent.futures import Future
    from concurrent.futures.thread import ThreadPoolExecutor

    def submit(self, fn, /, *args, **kwargs):
        future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as a worker would
            future.set_exception(exc)
        return future

    saved = ThreadPoolExecutor.submit
    ThreadPoolExecutor.submit = submit
    try:
        yield
    finally:
        ThreadPoolExecutor.submit = saved


_MISSING = object()


@contextlib.contextmanager
def patched(table: dict):
    """Set each (owner, attribute) of `table`; put everything back on exit."""
    # from the owner's own __dict__: getattr would unwrap a staticmethod/classmethod, and an
    # attribute inherited from a base class is restored by deleting the override
    saved = {(owner, name): vars(owner).get(name, _MISSING) for owner, name in table}
    try:
        for (owner, name), value in table.items():
            setattr(owner, name, value)
        yield
    finally:
        for (owner, name), value in saved.items():
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


@contextlib.contextmanager
def fake_gpus(runtime: FakeCudaRuntime | None = None, recorder: Recorder | None = None):
    """Enter fake GPUs; yields the FakeTensorMode (its `.runtime` and `.recorder` attached).
    Real tensors made before (weights on the host) become fake on first use."""
    guard.load()
    runtime = runtime or FakeCudaRuntime()
    recorder = recorder or Recorder()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    mode.runtime, mode.recorder = runtime, recorder
    with (
        _patched_fake_tensor_mode(),
        patched({**runtime.patches(), **_host_read_patches(recorder)}),
        _inline_thread_pools(),
        mode,
    ):
        yield mode
