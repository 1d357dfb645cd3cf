"""Stand-ins for the torch.cuda runtime API on a CPU-only torch build.

Each stand-in makes the checks the real call makes, through torch's own argument handling
where torch has it (`torch.cuda._utils._get_device_index`), so the fake accepts and refuses
what a CUDA build does: `set_device(torch.device("cuda"))` raises here as it does on an H100.
What the program did with the runtime is counted in `FakeCudaRuntime.calls` (streams made,
events recorded, pinned copies...), so a test can assert that a CUDA-only branch actually ran.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading

import torch

from .errors import FakeCudaError


class DeviceProperties:
    """The fields of torch.cuda.get_device_properties that torch itself (Dynamo, Inductor) and
    the project read, for an H100 SXM (sm_90) or a B200 (sm_100)."""

    def __init__(self, index: int, capability: tuple[int, int], total_memory: int):
        self.name = {9: "NVIDIA H100 80GB HBM3", 10: "NVIDIA B200"}.get(capability[0], "NVIDIA GPU") + " (fake)"
        self.major, self.minor = capability
        self.total_memory = total_memory
        self.multi_processor_count = 132
        self.max_threads_per_multi_processor = 2048
        self.max_threads_per_block = 1024
        self.warp_size = 32
        self.regs_per_multiprocessor = 65536
        self.shared_memory_per_block_optin = 232448
        self.shared_memory_per_multiprocessor = 233472
        self.L2_cache_size = 50 * 2**20
        self.gcnArchName = "NV"
        self.uuid = f"fake-{index}"
        self.index = index

    def __repr__(self):
        return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor})"


class FakeCudaRuntime:
    """`patches()` maps (owner, attribute) → stand-in; `tensor_rules.fake_gpus` installs them."""

    def __init__(self, devices: int = 8, capability: tuple[int, int] = (9, 0), total_memory: int | None = None):
        self.devices, self.capability = devices, tuple(capability)
        # H100 SXM: 80 GiB; B200: 180 GB
        self.total_memory = total_memory or (180 * 10**9 if capability[0] >= 10 else 80 * 2**30)
        self.calls: collections.Counter = collections.Counter()
        self._local = threading.local()
        self._stream_ids = itertools.count(1)
        self._default_streams: dict[int, torch.Stream] = {}
        self.Stream, self.Event = self._stream_class(), self._event_class()

    # ------------------------------------------------------------ devices
    def index(self, device, optional: bool = True) -> int:
        from torch.cuda._utils import _get_device_index

        idx = _get_device_index(device, optional=optional)
        if idx < 0:  # "the current device"
            return self.current_device()
        if idx >= self.devices:
            raise FakeCudaError(f"cuda:{idx}: invalid device ordinal ({self.devices} GPUs)")
        return idx

    def current_device(self) -> int:
        return getattr(self._local, "device", 0)

    def set_device(self, device) -> None:
        self.calls["set_device"] += 1
        from torch.cuda._utils import _get_device_index

        idx = _get_device_index(device)  # optional=False, as torch.cuda.set_device
        if idx >= 0:
            self._local.device = self.index(idx)

    def exchange_device(self, idx: int) -> int:
        previous = self.current_device()
        if idx >= 0:
            self._local.device = self.index(idx)
        return previous

    def synchronize(self, device=None) -> None:
        self.calls["synchronize"] += 1
        self.index(device)

    def properties(self, device=None) -> DeviceProperties:
        return DeviceProperties(self.index(device), self.capability, self.total_memory)

    # ------------------------------------------------------------ streams and events
    def _stream_class(self):
        runtime = self

        class Stream(torch.Stream):
            # torch.Stream(device="cuda") needs a guard with streams (FakeGuardImpl has none);
            # the explicit form takes any id.
            def __new__(cls, device=None, priority=0, **kwargs):
                runtime.calls["Stream"] += 1
                return super().__new__(
                    cls, stream_id=next(runtime._stream_ids), device_index=runtime.index(device), device_type=1
                )

            def __init__(self, device=None, priority=0, **kwargs):
                pass

            def wait_event(self, event):
                runtime.calls["Stream.wait_event"] += 1
                if not isinstance(event, runtime.Event):
                    raise FakeCudaError(f"Stream.wait_event needs a torch.cuda.Event, got {type(event).__name__}")
                if event.stream is not None and event.stream.device_index != self.device_index:
                    raise FakeCudaError(
                        f"a stream of cuda:{self.device_index} waits on an event "
                        f"recorded on cuda:{event.stream.device_index}"
                    )

            def wait_stream(self, stream):
                runtime.calls["Stream.wait_stream"] += 1

            def record_event(self, event=None):
                event = event or runtime.Event()
                event.record(self)
                return event

            def synchronize(self):
                runtime.calls["Stream.synchronize"] += 1

            def query(self):
                return True

        return Stream

    def _event_class(self):
        runtime = self

        class Event:
            def __init__(self, enable_timing=False, blocking=False, interprocess=False):
                runtime.calls["Event"] += 1
                self.stream = None

            def record(self, stream=None):
                runtime.calls["Event.record"] += 1
                self.stream = stream if stream is not None else runtime.current_stream()

            def wait(self, stream=None):
                (stream or runtime.current_stream()).wait_event(self)

            def synchronize(self):
                runtime.calls["Event.synchronize"] += 1

            def query(self):
                return True

            def elapsed_time(self, other):
                return 0.0

        return Event

    def current_stream(self, device=None):
        idx = self.index(device)
        chosen = getattr(self._local, "streams", {})
        if idx in chosen:
            return chosen[idx]
        if idx not in self._default_streams:
            self._default_streams[idx] = self.Stream(idx)
        return self._default_streams[idx]

    @contextlib.contextmanager
    def stream(self, s):
        self.calls["stream context"] += 1
        if s is None:
            yield
            return
        chosen = self._local.__dict__.setdefault("streams", {})
        previous = chosen.get(s.device_index)
        chosen[s.device_index] = s
        try:
            yield
        finally:
            if previous is None:
                del chosen[s.device_index]
            else:
                chosen[s.device_index] = previous

    # ------------------------------------------------------------ tensor methods
    def pin_memory(self_runtime):
        def pin_memory(tensor, device=None):
            self_runtime.calls["pin_memory"] += 1
            if tensor.device.type != "cpu":
                raise FakeCudaError(f"cannot pin a {tensor.device} tensor: only CPU tensors can be pinned")
            out = tensor.clone()
            out._fake_pinned = True
            return out

        return pin_memory

    def record_stream(self_runtime):
        def record_stream(tensor, stream):
            self_runtime.calls["record_stream"] += 1
            if tensor.device.type != "cuda":
                raise FakeCudaError(f"record_stream on a {tensor.device} tensor")
            if tensor.device.index != stream.device_index:
                raise FakeCudaError(f"record_stream: tensor on {tensor.device}, stream on cuda:{stream.device_index}")

        return record_stream

    # ------------------------------------------------------------ the table
    def patches(self) -> dict:
        c = torch.cuda
        return {
            (c, "is_available"): lambda: True,
            (c, "is_initialized"): lambda: True,
            (c, "device_count"): lambda: self.devices,
            (c, "current_device"): self.current_device,
            (c, "set_device"): self.set_device,
            # two distinct functions: Dynamo keeps a handler per function and refuses duplicates
            (c, "_exchange_device"): lambda idx: self.exchange_device(idx),
            (c, "_maybe_exchange_device"): lambda idx: self.exchange_device(idx),
            (c, "synchronize"): self.synchronize,
            (c, "get_device_capability"): lambda device=None: (self.index(device), self.capability)[1],
            (c, "get_device_properties"): self.properties,
            (c, "_get_device_properties"): self.properties,
            (c, "get_device_name"): lambda device=None: self.properties(device).name,
            (c, "mem_get_info"): lambda device=None: (self.index(device), (self.total_memory, self.total_memory))[1],
            (c, "empty_cache"): lambda: self.calls.update(["empty_cache"]),
            (c, "Stream"): self.Stream,
            (c, "Event"): self.Event,
            (c, "current_stream"): self.current_stream,
            (c, "default_stream"): self.current_stream,
            (c, "stream"): self.stream,
            # Dynamo saves and restores the CUDA RNG around every frame when CUDA is available
            (c, "get_rng_state"): lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
            (c, "set_rng_state"): lambda new_state, device="cuda": None,
            (c, "manual_seed"): lambda seed: None,
            (c, "manual_seed_all"): lambda seed: None,
            (c, "memory_allocated"): lambda device=None: 0,
            (c, "max_memory_allocated"): lambda device=None: 0,
            (c, "reset_peak_memory_stats"): lambda device=None: None,
            (torch.Tensor, "pin_memory"): self.pin_memory(),
            (torch.Tensor, "is_pinned"): lambda t, device=None: bool(getattr(t, "_fake_pinned", False)),
            (torch.Tensor, "record_stream"): self.record_stream(),
        }
