"""How far compile=true moves a bf16 generation, against eager bf16 and an fp32 reference:

    python benchmarks/compile_precision.py [variants=a,b,…] [key=value …]

Renders the built-in tiny model (the CLI's defaults unless overridden: 128×128×17, 10 steps)
once per variant and prints, for each, its distance to eager bf16 and to eager fp32 (the
reference): the latents' relative L2 error and, on the uint8 frames, the largest difference in
levels, the share of values that differ and the mean difference. Variants:

  fp32            eager float32: the reference
  bf16            eager bfloat16 (the default dtype)
  fused           bf16, compile=true with dynamo's "eager" backend: q/k/v fused, the captured
                  graph run op for op as eager runs it — what the fused GEMM alone changes
  aot_eager       bf16, compile=true through AOTAutograd without code generation (tests/parallel/test_hot_path.py's
  fp32 test)
  inductor        bf16, compile=true as users run it (Inductor's generated kernels)
  inductor_emul   inductor with torch._inductor.config.emulate_precision_casts=True
  fp32_inductor   float32, compile=true with Inductor

Inductor on a 2-core CPU spends 20–30 s per variant building its C++ kernels (cold cache).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VARIANTS = {  # name → (dtype, compile backend or None for eager, emulate_precision_casts)
    "fp32": ("float32", None, False),
    "bf16": ("bfloat16", None, False),
    "fused": ("bfloat16", "eager", False),
    "aot_eager": ("bfloat16", "aot_eager", False),
    "inductor": ("bfloat16", "inductor", False),
    "inductor_emul": ("bfloat16", "inductor", True),
    "fp32_inductor": ("float32", "inductor", False),
}


@dataclass
class Distance:
    latent_rel: float  # ‖a − b‖ / ‖b‖ over the final latents
    max_levels: int  # largest |a − b| over the uint8 frames
    differ: float  # share of uint8 values that differ
    mean_levels: float

    def __str__(self) -> str:
        return (
            f"latents {self.latent_rel:.2e}, frames max {self.max_levels:2d} levels, "
            f"{100 * self.differ:5.2f} % differ, mean {self.mean_levels:.3f}"
        )


def distance(a, b) -> Distance:
    """a, b: (latents, frames) of two renders."""
    la, lb = a[0].astype(np.float64), b[0].astype(np.float64)
    diff = np.abs(a[1].astype(np.int16) - b[1].astype(np.int16))
    return Distance(
        float(np.linalg.norm(la - lb) / np.linalg.norm(lb)),
        int(diff.max()),
        float((diff > 0).mean()),
        float(diff.mean()),
    )


def render(overrides: list[str], dtype: str, compile_backend: str | None, emulate: bool = False):
    """(latents, uint8 frames) of one tiny generation; compile_backend None runs eager."""
    import torch
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    from benchmarks.tiny_generation import compose_spec
    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate

    compiled = ["compile=true"] if compile_backend else []
    spec = compose_spec([*overrides, f"dtype={dtype}", *compiled], 1)
    backend = make_backend(spec, compile_backend=compile_backend or "inductor")
    torch._dynamo.reset()  # no graph of an earlier variant is reused
    counters.clear()
    with inductor_config.patch(emulate_precision_casts=emulate):
        gen = generate(spec, backend)
    graphs = counters["stats"]["unique_graphs"]  # 0 unless compiled: a variant that compiled nothing is no variant
    assert bool(graphs) == bool(compile_backend), (compile_backend, dict(counters["stats"]))
    return np.asarray(gen.latents), np.asarray(gen.frames)


def main(argv: list[str]) -> None:
    names = list(VARIANTS)
    overrides = []
    for arg in argv:
        if arg.startswith("variants="):
            names = arg.removeprefix("variants=").split(",")
        else:
            overrides.append(arg)
    names = ["fp32", "bf16"] + [n for n in names if n not in ("fp32", "bf16")]  # the two baselines first
    renders = {}
    for name in names:
        t0 = time.perf_counter()
        renders[name] = render(overrides, *VARIANTS[name])
        print(f"{name:14s} rendered in {time.perf_counter() - t0:6.1f} s", flush=True)
    print(f"\ntiny model, {' '.join(overrides) or 'CLI defaults'}; frames {renders['fp32'][1].shape}")
    for name in names[1:]:
        against = ["bf16", "fp32"] if name != "bf16" else ["fp32"]
        for i, base in enumerate(against):
            print(f"{name if i == 0 else '':14s} vs {base} eager: {distance(renders[name], renders[base])}")


if __name__ == "__main__":
    main(sys.argv[1:])
