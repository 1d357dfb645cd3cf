"""Inductor → Triton → cubin for a CUDA GPU this machine does not have (tests/gpu/test_triton_aot.py).

A CPU-only torch build can still run Inductor's CUDA code generation: the inputs are fake
tensors on `cuda` devices (FakeTensorMode: shapes, dtypes and devices, no data), and Triton
compiles the generated kernels to PTX and then to cubins with the `ptxas` its wheel ships.
Nothing is loaded or launched: there is no GPU. What this needs, each piece undone on exit:

- a CUDA device guard: a CPU build has none, and Python bindings that open a DeviceGuard on a
  cuda tensor (indexing, `.to("cuda")`) fail; c10's FakeGuardImpl registered as CUDA's guard
  (two lines of C++, built once with g++ against the wheel's own headers) takes its place;
- the few `torch.cuda` calls Dynamo and Inductor make (is_available, device capability and
  properties, current device, RNG state), answering as the chosen GPU would;
- FakeTensorMode told that no device exists to constant-fold onto (`avoid_device_init`: with
  is_available() True it would run a real copy to CUDA), and Inductor's constant folding off
  (it runs real `aten.full` on the device);
- Inductor's passes that time kernels on the device off (autotuning, pad_mm's padding);
- a Triton driver reporting the chosen capability, whose `load_binary` is never reached:
  Inductor's launchers are replaced by a recorder of the compiled kernels, and its generated
  wrapper's allocation fast path is routed through the dispatcher (so the fake mode sees it).

Kept apart from the fake-CUDA harness (tests/harness/fakegpu/) on purpose: this is the minimum for
compiling, and the two can merge later.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import tempfile
from dataclasses import dataclass

import torch

_GUARD_SRC = """#include <c10/core/impl/FakeGuardImpl.h>
C10_REGISTER_GUARD_IMPL(CUDA, c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>);
"""
_guard_loaded = False


@dataclass(frozen=True)
class Gpu:
    """What Inductor and Triton read about the device they compile for."""

    name: str
    capability: tuple[int, int]
    sms: int
    shared_memory: int  # bytes per block (opt-in)
    memory: int  # bytes
    l2: int


H100 = Gpu("NVIDIA H100 80GB HBM3", (9, 0), 132, 232448, 80 * 2**30, 50 * 2**20)
B200 = Gpu("NVIDIA B200", (10, 0), 148, 232448, 180 * 2**30, 126 * 2**20)


def load_cuda_guard(cache_dir: str | None = None) -> None:
    """Build (once per torch version, ~3 s with g++) and load the fake CUDA device guard."""
    global _guard_loaded
    if _guard_loaded:
        return
    if torch.cuda.is_available():
        raise RuntimeError("torch has CUDA here: a fake guard would replace the real one")
    cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "parallel_wan_fake_cuda_guard")
    torch_dir = os.path.dirname(torch.__file__)
    so = os.path.join(cache_dir, f"libfake_cuda_guard-{torch.__version__}.so")
    if not os.path.exists(so):
        os.makedirs(cache_dir, exist_ok=True)
        src = os.path.join(cache_dir, "fake_cuda_guard.cpp")
        with open(src, "w") as f:
            f.write(_GUARD_SRC)
        subprocess.run(
            [
                "g++",
                "-O1",
                "-shared",
                "-fPIC",
                "-std=c++17",
                f"-I{torch_dir}/include",
                src,
                f"-L{torch_dir}/lib",
                "-lc10",
                f"-Wl,-rpath,{torch_dir}/lib",
                "-o",
                so + ".tmp",
            ],
            check=True,
        )
        os.replace(so + ".tmp", so)
    ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL)
    _guard_loaded = True


class _Properties:
    """`torch.cuda.get_device_properties` of `gpu`: the fields Inductor reads."""

    def __init__(self, gpu: Gpu, index: int):
        self.name, (self.major, self.minor) = gpu.name, gpu.capability
        self.total_memory, self.multi_processor_count, self.L2_cache_size = gpu.memory, gpu.sms, gpu.l2
        self.max_threads_per_multi_processor, self.max_threads_per_block, self.warp_size = 2048, 1024, 32
        self.regs_per_multiprocessor = 65536
        self.shared_memory_per_block_optin = gpu.shared_memory
        self.shared_memory_per_multiprocessor = gpu.shared_memory + 1024
        self.clock_rate, self.memory_clock_rate, self.memory_bus_width = 1980000, 2619000, 5120
        self.gcnArchName, self.uuid, self.index = "NV", f"fake-{index}", index


def _set(patches: list, owner, name: str, value) -> None:
    patches.append(
        (owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING))
    )
    setattr(owner, name, value)


_MISSING = object()


def _triton_driver(gpu: Gpu):
    import triton
    from triton.backends.nvidia.driver import CudaDriver, CudaLauncher

    class Utils:
        def get_device_properties(self, device):
            return {
                "max_shared_mem": gpu.shared_memory,
                "multiprocessor_count": gpu.sms,
                "max_num_regs": 65536,
                "warpSize": 32,
                "sm_clock_rate": 1980000,
                "mem_clock_rate": 2619000,
                "mem_bus_width": 5120,
                "max_threads_per_block": 1024,
            }

        def load_binary(self, name, kernel, shared, device):
            raise RuntimeError(f"no GPU: kernel {name} compiled but cannot be loaded")

    class Driver(CudaDriver):
        def __init__(self):  # CudaDriver's own __init__ loads libcuda, which is not here
            self.utils, self.launcher_cls = Utils(), CudaLauncher
            self.get_device_capability = lambda device=None: gpu.capability
            self.get_current_stream = lambda device=None: 0
            self.get_current_device = lambda: 0
            self.set_current_device = lambda device: None

        @staticmethod
        def is_active():
            return True

    config = triton.runtime.driver
    # The previous driver as it was: asking for `config.active` would create the default CUDA
    # driver, which fails without libcuda.
    previous = config._active
    config.set_active(Driver())

    def restore():
        config._active = previous

    return restore


@dataclass(frozen=True)
class Kernel:
    name: str
    target: str  # Triton's GPUTarget, e.g. "cuda:90"
    arch: str  # the cubin's architecture as ptxas wrote it into the PTX (".target sm_90a")
    cubin_bytes: int
    fp8_converts: int = 0  # PTX conversions to float8 e4m3 (`cvt….e4m3x2`: sm_89 and newer)


def _record_instead_of_launch(kernels: list, patches: list) -> None:
    """Inductor's kernels are compiled (Triton → PTX → cubin) when the generated module loads;
    record each one where Inductor would load it onto the GPU, and launch nothing."""
    import torch._C._dynamo.guards as guards
    from torch._inductor.runtime import triton_heuristics as th

    def _make_launchers(self):
        for result in self.compile_results:
            binary = result.kernel
            ptx = binary.asm.get("ptx", "")
            arch = next((line.split()[1] for line in ptx.splitlines() if line.startswith(".target")), "?")
            kernels.append(
                Kernel(
                    binary.name,
                    f"{binary.metadata.target.backend}:{binary.metadata.target.arch}",
                    arch,
                    len(binary.asm.get("cubin", b"")),
                    ptx.count("e4m3"),
                )
            )
        self.launchers = []

    _set(patches, th.CachingAutotuner, "_make_launchers", _make_launchers)
    _set(patches, th.CachingAutotuner, "run", lambda self, *args, **kwargs: None)
    # The generated wrapper allocates through a C++ fast path that bypasses the dispatcher (and
    # so the fake mode): route it through the ordinary ops.
    _set(
        patches,
        guards,
        "_empty_strided_cuda",
        lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype, device="cuda"),
    )
    _set(
        patches,
        guards,
        "_reinterpret_tensor",
        lambda t, size, stride, offset=0: torch.as_strided(t, size, stride, t.storage_offset() + offset),
    )
    _set(patches, torch._C, "_cuda_getCurrentRawStream", lambda device: 0)


# Inductor's per-process caches of what the device is; cleared so one process can compile for
# several GPUs in turn.
_DEVICE_CACHES = (
    ("torch._inductor.runtime.hints", "DeviceProperties.create"),
    ("torch._inductor.utils", "is_big_gpu"),
    ("torch._inductor.utils", "get_max_num_sms"),
    ("torch._inductor.kernel.mm", "_is_sm7x_or_older_gpu"),
    ("torch._inductor.codegen.cuda.cuda_env", "get_cuda_arch"),
    ("torch._inductor.codegen.cuda.cuda_env", "is_datacenter_blackwell_arch"),
    ("torch._inductor.comm_analysis", "get_gpu_type"),
    # Whether triton can run here: cached per process, so a CPU test that compiled
    # earlier in the same session left "no" behind (TritonMissing in a full run).
    ("torch.utils._triton", "has_triton"),
    ("torch.utils._triton", "has_triton_tma_device"),
    ("torch.utils._triton", "has_triton_tma"),
    ("torch.utils._triton", "has_datacenter_blackwell_tma_device"),
    ("torch.utils._triton", "has_triton_tensor_descriptor_host_tma"),
    ("torch.utils._triton", "has_triton_experimental_host_tma"),
    ("torch.utils._triton", "_device_supports_tma"),
)


def _clear_device_caches() -> None:
    import importlib

    for module, path in _DEVICE_CACHES:
        fn = importlib.import_module(module)
        for part in path.split("."):
            fn = getattr(fn, part)
        fn.cache_clear()


def _scaled_mm_out_on_meta():
    """Inductor's wrapper calls the FP8 GEMM as `aten._scaled_mm.out` into its own buffer, which
    torch 2.13 has no meta kernel for (the functional form has one, with cuBLASLt's layout and
    dtype checks): register one, for the fake run's duration, that makes those checks."""
    lib = torch.library.Library("aten", "IMPL")

    def out_variant(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False, *, out):
        result = torch.ops.aten._scaled_mm.default(
            a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum
        )
        torch._check(
            out.shape == result.shape and out.dtype == result.dtype,
            lambda: f"_scaled_mm.out into {tuple(out.shape)} {out.dtype}, result {tuple(result.shape)} {result.dtype}",
        )
        return out

    lib.impl("_scaled_mm.out", out_variant, "Meta")
    return lib


@contextlib.contextmanager
def compiling_for(gpu: Gpu):
    """Inside: tensors made on "cuda" are fake, `torch.compile` (Inductor) generates and
    compiles Triton kernels for `gpu`, and nothing runs. Yields the list of compiled `Kernel`s,
    filled as Inductor compiles. Each entry gets fresh Dynamo, Inductor and Triton caches, so
    the kernels are compiled here for this target, never reused from another one."""
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch._subclasses.fake_tensor import FakeTensorMode

    load_cuda_guard()
    patches: list = []
    kernels: list[Kernel] = []
    cuda = torch.cuda
    for name, value in {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "get_device_capability": lambda device=None: gpu.capability,
        "get_device_properties": lambda device=None: _Properties(gpu, 0),
        "_get_device_properties": lambda device=None: _Properties(gpu, 0),
        "get_device_name": lambda device=None: gpu.name,
        "_exchange_device": lambda index: 0,
        "_maybe_exchange_device": lambda index: 0,
        "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
        "set_rng_state": lambda state, device="cuda": None,
        "synchronize": lambda device=None: None,
    }.items():
        _set(patches, cuda, name, value)
    _set(patches, FakeTensorMode, "avoid_device_init", property(lambda self: True))
    _record_instead_of_launch(kernels, patches)
    scaled_mm_out = _scaled_mm_out_on_meta()
    restore_driver = _triton_driver(gpu)
    config = {
        "compile_threads": 1,
        "fx_graph_cache": False,
        "autotune_local_cache": False,
        "joint_graph_constant_folding": False,
        "freezing": False,
        "max_autotune": False,
        "use_static_cuda_launcher": False,
        # pad_mm decides by timing real matmuls on the device (none here); off, matmul
        # shapes stay as the model has them
        "shape_padding": False,
    }
    with (
        tempfile.TemporaryDirectory(prefix="triton_aot_") as cache,
        inductor_config.patch(config),
        _environ(TRITON_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache),
    ):
        torch._dynamo.reset()
        _clear_device_caches()
        try:
            with FakeTensorMode(allow_non_fake_inputs=False):
                yield kernels
        finally:
            torch._dynamo.reset()
            _clear_device_caches()
            restore_driver()
            scaled_mm_out._destroy()
            for owner, name, value in reversed(patches):
                if value is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, value)


@contextlib.contextmanager
def _environ(**values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
