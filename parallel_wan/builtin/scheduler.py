"""The built-in tiny model's scheduler: diffusers' UniPC with flow sigmas, as the Wan 2.2
diffusers checkpoints carry it. A leaf (no torch, no diffusers), so the checks that run before
anything loads can build the tiny model's schedule exactly as its checkpoint will describe it."""

TINY_SCHEDULER_CONFIG = {"prediction_type": "flow_prediction", "use_flow_sigmas": True}
