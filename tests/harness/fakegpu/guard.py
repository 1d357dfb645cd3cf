"""The one piece of C++: c10's FakeGuardImpl registered as the CUDA device guard.

A CPU-only torch build has no CUDA device guard, so every Python binding that opens a
DeviceGuard on a cuda tensor (x[1:3], .to("cuda"), torch.as_tensor(..., device="cuda"))
raises "PyTorch is not linked with support for cuda devices" even on fake tensors. c10 ships a
guard that only remembers the current index (FakeGuardImpl, made for tests); registering it for
CUDA is two lines, compiled against the wheel's own headers with g++ (~3 s). The library is
cached per torch version and source, so a test session builds it at most once and later
sessions not at all.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile

import torch

SOURCE = """#include <c10/core/impl/FakeGuardImpl.h>
C10_REGISTER_GUARD_IMPL(CUDA, c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>);
"""
_loaded: str | None = None


def cache_dir() -> str:
    return os.environ.get("PW_FAKEGPU_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "parallel_wan", "fakegpu"
    )


def library_path() -> str:
    key = hashlib.sha256((torch.__version__ + SOURCE).encode()).hexdigest()[:12]
    return os.path.join(cache_dir(), f"libfake_cuda_guard-{torch.__version__}-{key}.so")


def build(path: str) -> None:
    torch_dir = os.path.dirname(torch.__file__)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
        src = os.path.join(tmp, "fake_cuda_guard.cpp")
        with open(src, "w") as f:
            f.write(SOURCE)
        out = os.path.join(tmp, "guard.so")
        cmd = [
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
            out,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"building the fake CUDA guard failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
        os.replace(out, path)  # atomic: parallel sessions never load a half-written library


def load() -> str:
    """Build once (cached) and load the guard into this process; returns the library's path."""
    global _loaded
    if _loaded:
        return _loaded
    if torch.backends.cuda.is_built():
        raise RuntimeError(
            "this torch has CUDA: the fake guard would replace the real one; run the fake-GPU tests with the CPU wheel"
        )
    path = library_path()
    if not os.path.exists(path):
        build(path)
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    _loaded = path
    return path
