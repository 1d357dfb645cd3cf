"""The sidecar's `info` has one builder (pipeline/sidecar.py) fed with what ran: its keys keep
the order sidecars have always had, and generate.py assembles none of it itself."""

import inspect

from harness.settings import spec_for

from parallel_wan.backends import make_backend
from parallel_wan.pipeline import generate as run_generation, sidecar

# A tiny run with a step cache and nothing optional besides (no image, LoRA or expert files).
KEYS = [
    "checkpoint",
    "schedule",
    "timesteps",
    "sigmas",
    "steps_per_expert",
    "steps_plan",
    "latent_shape",
    "device",
    "mesh",
    "quantization",
    "attention",
    "cache",
    "videos",
]


def test_the_sidecar_keeps_its_keys_in_order():
    spec = spec_for("steps=2", "num_frames=5", "height=32", "width=32", "dtype=float32", "cache=fbcache")
    info = run_generation(spec, make_backend(spec)).info
    assert list(info) == KEYS
    assert sum(info["steps_per_expert"].values()) == 2 and len(info["steps_plan"]) == 2


def test_generate_leaves_the_record_to_the_sidecar_module():
    source = inspect.getsource(inspect.getmodule(run_generation))
    assert "sidecar_info(" in source and 'info["' not in source and '"checkpoint":' not in source
    assert "def sidecar_info(" in inspect.getsource(sidecar)
