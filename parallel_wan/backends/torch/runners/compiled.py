"""compile=true's block runner: `torch.compile` of the block function the model's forward
passes to its runner, run by the memory mode's own runner (resident, sharded or exchange).

Regional compilation, as torchtitan and gpt-fast do it: the one block function that every
layer runs is compiled, not the whole forward — 40 identical layers compile once, and the
embeddings and head, a fraction of a percent of the work, stay eager (so what the forward
returns is an ordinary tensor, never one in a CUDA graph's pool that the next replay would
overwrite). Inductor fuses the norm + modulation + cast chains, RMSNorm and RoPE around the
GEMMs. The forward makes a new block closure each call; dynamo keys its cache on the code
object and guards on the closure's values (tensor shapes and dtypes, the attention callable,
the config), so wrapping each call's closure compiles once per expert layout, not per call.

Self-attention is kept out of the graph (`Compiler.attention`: `torch.compiler.disable`): the
sequence-parallel callable issues collectives and picks its kernel at run time (attention.py),
and the kernel itself is already one fused op. The predictor wraps its attention callable once,
so the block's guard on it holds from call to call.

Numbers: in float32 the compiled blocks give eager's latents (6e-7 relative). In bfloat16 they
do not: Inductor computes each fused chain of pointwise ops in fp32 and rounds once, where eager
rounds after every op, so compiled bf16 lies as far from eager bf16 as either lies from fp32 (and
no further from fp32 than eager). `torch._inductor.config.emulate_precision_casts` is left off:
it brings one step closer to eager, but the generated kernels' own summation order and math
still flip a few bf16 roundings, the steps carry them on, and after 10 steps it is no closer to
eager than without (BENCHMARKS.md "compile=true in bfloat16"; tests/parallel/test_hot_path.py holds the
property).

CUDA graphs (`cuda_graphs=True`: inductor's "reduce-overhead" mode) remove per-kernel launch
cost, which matters only when kernels are short (small token counts); each block's weights are
marked as static addresses so a replay does not copy them in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ....weights.tree import iter_leaves
from .block_pass import BlockPass, BlockRunner


class Compiler:
    """How blocks are compiled. backend: torch.compile's backend; "inductor" generates
    kernels, "aot_eager" only captures the graphs (tests use it: the capture and its guards are
    what this file decides; inductor's CPU C++ build takes ~50 s on a 2-core machine)."""

    def __init__(self, backend: str = "inductor", cuda_graphs: bool = False):
        self.backend, self.cuda_graphs = backend, cuda_graphs

    def attention(self, attention: Callable) -> Callable:
        return torch.compiler.disable(attention)

    def block(self, block: Callable) -> Callable:
        mode = "reduce-overhead" if self.cuda_graphs else None
        compiled = torch.compile(block, dynamic=False, mode=mode, backend=self.backend)
        if not self.cuda_graphs:
            return compiled

        def with_static_weights(h, weights):
            for _, leaf in iter_leaves(weights):
                torch._dynamo.mark_static_address(leaf)  # sets a flag on the tensor: idempotent
            return compiled(h, weights)

        return with_static_weights


class CompiledPass:
    """The inner runner's pass with each run's block function compiled; the inner pass keeps
    its own schedule (gathers, exchange), its count of blocks done, and its own close."""

    def __init__(self, inner: BlockPass, compiler: Compiler):
        self.inner, self.compiler = inner, compiler
        self._compiled: tuple[Callable, Callable] | None = None  # (block function, compiled)

    @property
    def count(self) -> int:
        return self.inner.count

    @property
    def done(self) -> int:
        return self.inner.done

    def run(self, block: Callable, h, stop: int | None = None):
        if self._compiled is None or self._compiled[0] is not block:
            self._compiled = (block, self.compiler.block(block))
        return self.inner.run(self._compiled[1], h, stop)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CompiledRunner(BlockRunner):
    def __init__(self, inner: BlockRunner, compiler: Compiler):
        self.inner, self.compiler = inner, compiler

    def open(self, blocks) -> CompiledPass:
        if self.compiler.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()  # one forward = one step of the graph trees
        return CompiledPass(self.inner.open(blocks), self.compiler)
