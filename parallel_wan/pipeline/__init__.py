"""The orchestrator: one generation end to end, backend-agnostic (DESIGN.md steps 2–7).

Load → encode text once → draw noise on the host from the seed → denoise patch tokens with
the dual-expert loop (the host decides the expert and guidance per step; the backend's noise
predictor runs the forward and the CFG combine; the elementwise sampler update runs on the
backend's token layout) → decode with the VAE → uint8 frames.

checkpoint.py    preflight checks, the built-in tiny model, loading every component
conditioning.py  the input image: I2V condition channels, TI2V's held first frame
work.py          what one controller computes (a rank's shard, or everything) and the gather
steps.py         the host's decisions per step: schedule, expert, guidance, weight moves
loop_state.py    the loop's explicit state (step, latents, sampler state, cache state) and its files
denoise.py       the one denoising loop, from any step to any step
generate.py      `generate`: the phases, timed
"""

from ..report.frames import to_uint8_frames
from .checkpoint import HIGH, LOW, SINGLE, Loaded, check_compatible, check_heads, load_components, preflight
from .conditioning import i2v_condition, load_image, ti2v_first_frame
from .denoise import DenoiseTask, denoise, draw_noise
from .loop_state import LoopState, load_loop_state, rank_stem, save_loop_state
from .steps import Step, expert_for, pick_schedule, step_plan
from .generate import Generation, generate
from .work import RankWork, gather_latent_tokens, plan_work

__all__ = [
    "HIGH", "LOW", "SINGLE", "DenoiseTask", "Generation", "Loaded", "LoopState", "RankWork", "Step",
    "check_compatible", "check_heads", "denoise", "draw_noise", "expert_for", "gather_latent_tokens", "generate",
    "i2v_condition", "load_components", "load_image", "load_loop_state", "pick_schedule", "plan_work", "preflight",
    "rank_stem", "save_loop_state", "step_plan", "ti2v_first_frame", "to_uint8_frames",
]
