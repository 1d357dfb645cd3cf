"""What the pipeline and the jobs ask of a backend, written down: `Backend`, the `NoisePredictor`
it makes for a generation's denoising loop, and the `VideoDecoder` for its VAE decode.

A backend subclasses these Protocols (as `backends/torch` and `backends/jax` do), so every
optional capability has an explicit default here — a no-op, or the single-process answer —
and the code above `backends/` calls it unconditionally: no `getattr` probing, no branching on
a backend's name (tests/unit/test_backend_contract.py checks both, and runs the tiny model's loop
through a third backend written from this file alone: numpy on one device).

Arrays are the backend's own (torch tensors, jax arrays, numpy arrays); `ops` is the backend's
implementation of the namespace the model is written against (models/). Construction changes no
global state: the launcher's world is started first (backends/torch/world.py for torch), then a
backend is made from a device and a mesh (backends/__init__.py `make_backend`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class NoisePredictor(Protocol):
    """The denoising loop's model call, on this controller's tokens (pipeline/denoise.py)."""

    # A step cache's host side (caching/): `load(arrays)` before the loop, `state()` after it,
    # so a saved loop state carries it. None: no step cache.
    cache: Any = None

    def __call__(self, expert: str, x, t: float, guidance: float):
        """The guided noise prediction of `expert` at timestep `t` for latent tokens `x`."""
        ...

    def shard(self, x):
        """`x` laid out as the predictor wants its input (a global array's sharding); as is by default."""
        return x

    def before_step(self, step) -> None:
        """Called before every step with its `pipeline.steps.Step` (memory=swap moves weights here)."""
        return None

    def cache_report(self) -> dict | None:
        """The step cache's record for the sidecar (what was skipped), or None without one."""
        return None

    def sparse_report(self) -> dict | None:
        """Sparse attention's record for the sidecar (its density, the FLOPs it skipped), or
        None when attention was dense."""
        return None

    def compile(self, x, plan=None, sampler=None, held=None) -> dict:
        """Compile the step programs with the real shapes ahead of the timed loop (a backend with
        `compiles_ahead`); {program: seconds}."""
        return {}

    def run_steps(self, x, sampler_state: dict, plan, sampler, held, start: int, stop: int):
        """Steps [start, stop) as one program (scan_loop=true) → (latents, sampler state)."""
        raise NotImplementedError("this backend runs the loop on the host; scan_loop=true is a JAX setting")


@runtime_checkable
class VideoDecoder(Protocol):
    """The VAE decode of a generation's latents into uint8 frames."""

    def __call__(self, latents) -> list[np.ndarray]:
        """One (frames, height, width, 3) uint8 array per video on the process that writes
        outputs; [] elsewhere. Every process of the job calls it."""
        ...

    def compile(self, latent_shape) -> dict:
        """Compile ahead of the timed decode (a backend with `compiles_ahead`); {program: seconds}."""
        return {}

    def frames_and_tail(self, latents, tail: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(the uint8 videos as calling the decoder returns them, and each video's last `tail`
        decoded frames as float32 (1, 3, tail, height, width) in [-1, 1] on every process): Animate
        conditions each segment on the last one's decoded floats. Every process calls it."""
        raise NotImplementedError(f"{type(self).__name__} does not decode a segment's tail yet (Animate, issue 42)")


@runtime_checkable
class Backend(Protocol):
    name: str
    ops: Any  # the model's ops namespace (backends/torch/ops.py, backends/jax/ops.py)
    device: Any  # what logs and the sidecar name (a torch.device, "cpu ×8", …)
    # One process drives every device (JAX) and holds global arrays: its work is the whole
    # padded sequence and every prompt, and one loop state is saved for the job. False: one
    # process per device (torchrun), each with its own shard and its own saved state.
    single_controller: bool = False
    compiles_ahead: bool = False  # a warm-up phase compiles every program before the timed run
    rank: int = 0  # this process in the job (a torch rank; a JAX process index)
    # The job's one process that speaks for it: binds the server's port, claims the next job
    # and decides what every process runs next (`same_on_every_rank` sends the leader's value).
    # Exactly one process of a job is the leader (JAX: process 0 of the hosts; torch: rank 0).
    leader: bool = True
    # `place` may run on several threads at once (the loader places the experts and the VAE side
    # by side); False: one at a time in a fixed order, because placing is a collective every
    # process must enter in the same order (JAX across hosts).
    places_concurrently: bool = True
    # Runs the text encoder (one rank of a torch job, then `broadcast_from_main`; every JAX host
    # encodes its own copy).
    encodes_text: bool = True
    writes_outputs: bool = True  # writes the video, sidecar, markers and job records
    text_device: Any = "cpu"  # where the PyTorch text encoder runs
    # how a quantized block linear multiplies (config/quantization.py): "dequant" widens its weight
    # as it runs; "fp8" multiplies in FP8 (torch: backends/torch/fp8_gemm.py). The sidecar records it.
    quant_compute: str = "dequant"
    # an expert placed whole takes its LoRA merged by `place` on the device (placement's `lora=`,
    # lora/merge.py `merge_on_device`) instead of by the loader on the host: torch on a GPU
    merges_lora_on_device: bool = False

    def attention_kernel(self, dtype: str, head_dim: int) -> str | None:
        """The self-attention kernel attention_impl resolved to for a model of `head_dim` run in
        `dtype` (torch: backends/torch/attention.py's name); None where the backend has no
        choice of kernel. The sidecar records it."""
        return None

    # ------------------------------------------------------------ arrays
    def to_device(self, array, dtype: str | None = None):
        """A host array on the device(s), cast to `dtype` when given."""
        ...

    def to_host(self, x) -> np.ndarray: ...

    def place(self, tree, dtype: str, keep_fp32=None, **placement):
        """A loaded param tree on the device(s) in `dtype` (float32 where `keep_fp32(name)`);
        `placement`: a backend's own memory-mode options (pipeline/checkpoint.py passes them), and
        `lora=` only where `merges_lora_on_device`."""
        ...

    def weight_shard(self, memory: str) -> tuple[int, int] | None:
        """(index, count) of the rows this process loads of every transformer tensor, or None:
        whole tensors (the loader's `shard=`)."""
        return None

    def synchronize(self) -> None:
        """Wait for queued device work (phase timings); nothing to wait for by default."""
        return None

    def inference_mode(self):
        return contextlib.nullcontext()

    # ------------------------------------------------------------ the job's processes
    def broadcast_from_main(self, x):
        """The main process's `x` on every process (the text embeddings)."""
        return x

    def same_on_every_rank(self, value):
        """The leader's small picklable `value` on every process (e.g. the output folder it
        claimed, the server's next job); every process calls it."""
        return value

    def any_rank(self, flag: bool) -> bool:
        """True on every process when `flag` is on any (the preemption vote; also a barrier)."""
        return flag

    def gather_tokens(self, local):
        """This process's sequence shard joined with its sequence-parallel peers' (one per process
        backend; a single controller already holds the whole sequence)."""
        return local

    def exchange_dp(self, local) -> list:
        """Every dp group's `local`, in dp order (CFG parallel's two halves)."""
        return [local]

    # ------------------------------------------------------------ generation parts
    def noise_predictor(self, task) -> NoisePredictor:
        """The loop's predictor for a `pipeline.DenoiseTask` (experts, context, work, caches)."""
        ...

    def video_decoder(self, vae_params, vae_config) -> VideoDecoder: ...

    def vae_encode(self, params, video: np.ndarray, cfg):
        """The VAE encode of a conditioning video (I2V, TI2V) → its latents on the device(s)."""
        ...
