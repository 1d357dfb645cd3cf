"""Per-device memory of a run, before it runs:

    python -m parallel_wan.plan model=wan2.2_t2v_a14b mesh=dp2_cp4 device_memory_gb=80 [memory=sharded height=… \
        width=… num_frames=… dtype=…]

The same Hydra config and validation as `parallel_wan.run` (world size = the mesh's), the
model's architecture from its preset (or from checkpoint_dir's configs when given; no weights
are read), and the shapes the run uses: the SequenceShards token split, the CFG rows per rank,
the dtype policy of the loader. Prints per device: weights, the denoise loop's tensors, text
encoder, VAE decode, the peak of each phase, and FITS / DOES NOT FIT with what to try. Exit
status: 0 fits, 1 does not fit, 2 a bad setting (one line, as the run reports it).

What is counted is what `live_bytes` measures: tensor storages, at op boundaries.
- Weights: the model's parameter tables (models/transformer_shapes.py, vae_shapes.py), in the loader's dtypes
  (equal to the loaded trees' bytes), per memory mode (`weight_bytes`).
- Denoise: the run's own code on meta tensors of rank 0's shapes — `pipeline.denoise.denoise`
  (the sampler and its state) driving the run's `EagerNoisePredictor` (CFG rows, timesteps,
  the forward, the sequence-parallel attention, the dp exchange, the guidance combine) for
  PLAN_STEPS steps on a `MetaBackend` whose collectives send nothing — plus what exists
  before the loop (context, RoPE, noise).
- VAE decode: `models.vae.decode` and the uint8 frames on meta tensors of the whole video,
  for rank 0's band when the decode is split (the run's `HeightBandOps`, null collectives).

One file per phase: architecture.py, weight_bytes.py, denoise_bytes.py (on meta_backend.py),
text_encoder_bytes.py, vae_bytes.py (on steady_decode.py); report.py joins them; cli.py is `python -m
parallel_wan.plan` (parallel_wan/plan/ holds only that command's name). Around them: fits.py,
the check every run and request passes before anything loads (a floor, bound.py's arithmetic
upper bound of the plan, then the plan itself), host_memory.py (what a process may allocate:
MemAvailable, or its container's cgroup limit), compute_time.py (the job's FLOPs over this
device's measured speed: how long it will take).
Not counted, here or by the measurement: a kernel's private scratch (CPU flash attention's
per-thread buffers, convolution workspaces, cuDNN/flash workspaces), the CUDA caching
allocator's rounding and fragmentation, the CUDA context (~0.5 GB per device), NCCL's
buffers. On CPU the figures equal the measured peaks (tests/unit/test_plan.py: within 0.05 %);
on a GPU add those. The text encoder's activations are a rough bound (widest FFN layer).
"""

from .architecture import TEXT_LEN, UMT5_XXL, architecture, transformer_shapes
from .cli import main, planning_spec
from .denoise_bytes import PLAN_STEPS, DenoiseBytes, RankShapes, cache_bytes, denoise_bytes, rank_shapes
from .report import GB, MemoryPlan, plan, report, suggestions
from .text_encoder_bytes import text_encoder_bytes
from .vae_bytes import VaeBytes, vae_decode_bytes
from .weight_bytes import ExpertBytes, expert_bytes, tensor_bytes, weight_bytes

__all__ = [
    "GB",
    "PLAN_STEPS",
    "TEXT_LEN",
    "UMT5_XXL",
    "DenoiseBytes",
    "ExpertBytes",
    "MemoryPlan",
    "RankShapes",
    "VaeBytes",
    "architecture",
    "cache_bytes",
    "denoise_bytes",
    "expert_bytes",
    "main",
    "plan",
    "planning_spec",
    "rank_shapes",
    "report",
    "suggestions",
    "tensor_bytes",
    "text_encoder_bytes",
    "transformer_shapes",
    "vae_decode_bytes",
    "weight_bytes",
]
