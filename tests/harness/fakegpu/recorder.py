"""What a simulated rank did on its fake GPU, op by op: which ops ran on which device in which
dtype, every copy between host and device, every read of tensor data on the host — each tagged
with the phase of the run it happened in ("before", "step 0", "step 1", ..., "after"), which the
runner sets from the denoising loop's progress callback."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from parallel_wan.backends.torch import kernels

MATMUL_OPS = {
    "aten.mm",
    "aten.bmm",
    "aten.addmm",
    "aten.baddbmm",
    "aten.linear",
    "aten.matmul",
    "aten.einsum",
    "aten.convolution",
    "aten._convolution",
    "aten.conv3d",
    "aten.conv2d",
}
# The fused attention ops by the kernel that launches them (each registered kernel's `op`:
# parallel_wan/backends/torch/kernels/), and torch's own SDPA, which chooses on the GPU.
ATTENTION_OPS = {
    **{k.op: k.name for k in kernels.kernels() if k.op is not None},
    "aten.scaled_dot_product_attention": "sdpa (torch chooses on the GPU)",
}


@dataclass(frozen=True)
class Transfer:
    phase: str
    source: str  # device
    target: str
    shape: tuple
    pinned: bool  # the host side is pinned memory (an async DMA on a real GPU)
    non_blocking: bool

    def __str__(self):
        kind = "pinned" if self.pinned else "pageable"
        return f"{self.source}→{self.target} {self.shape} ({kind}, non_blocking={self.non_blocking}) in {self.phase}"


@dataclass
class Recorder:
    phase: str = "before"
    ops: collections.Counter = field(default_factory=collections.Counter)  # (op, device, dtype, phase) → n
    transfers: list[Transfer] = field(default_factory=list)
    host_reads: list[tuple[str, str, str]] = field(default_factory=list)  # (phase, what, device)
    matmuls: collections.Counter = field(default_factory=collections.Counter)  # (phase, dtype, weight shape) → n

    @staticmethod
    def in_loop(phase: str) -> bool:
        return phase.startswith("step ")

    def ops_in_loop(self, names) -> dict:
        return {k: n for k, n in self.ops.items() if k[0] in names and self.in_loop(k[3])}

    def attention_kernels(self) -> set[str]:
        """The fused attention kernels the loop launched (the registered kernels' names)."""
        return {ATTENTION_OPS[op] for op, _, _, phase in self.ops if op in ATTENTION_OPS and self.in_loop(phase)}

    def loop_matmuls(self, dtype: str) -> collections.Counter:
        """Weight shape → calls, of the loop's matmuls that ran in `dtype`."""
        out = collections.Counter()
        for (phase, dt, shape), n in self.matmuls.items():
            if dt == dtype and self.in_loop(phase):
                out[shape] += n
        return out

    def loop_transfers(self) -> list[Transfer]:
        return [t for t in self.transfers if self.in_loop(t.phase)]

    def loop_host_reads(self) -> list[tuple[str, str, str]]:
        """Reads of device data on the host inside the loop (each one a stall on a GPU)."""
        return [r for r in self.host_reads if self.in_loop(r[0]) and r[2] != "cpu"]
