"""The orchestrator: one generation end to end, backend-agnostic (the data flow in docs/architecture.md).

Load → encode text once → draw noise on the host from the seed → denoise patch tokens with
the dual-expert loop (the host decides the expert and guidance per step; the backend's noise
predictor runs the forward and the CFG combine; the elementwise sampler update runs on the
backend's token layout) → decode with the VAE → uint8 frames.

checkpoint.py    preflight checks, the built-in tiny model, `load`: the one load of a run
conditioning.py  the input image: I2V condition channels, TI2V's held first frame
local_work.py    what one controller computes (a rank's shard, or everything) and the gather
steps.py         the host's decisions per step: schedule, expert, guidance, weight moves
loop_state.py    the loop's explicit state (step, latents, sampler state, cache state) and its files
denoise.py       the one denoising loop, from any step to any step
generate.py      `generate`: the phases, timed
"""

from .checkpoint import Loaded, load, load_components, preflight
from .conditioning import load_image
from .denoise import DenoiseTask, denoise
from .generate import Generation, generate

__all__ = [
    "DenoiseTask",
    "Generation",
    "Loaded",
    "denoise",
    "generate",
    "load",
    "load_components",
    "load_image",
    "preflight",
]
