"""Which architecture a run used (issue 38 item 11): with checkpoint_dir the checkpoint's configs
win over the preset's architecture (docs/architecture.md), so a preset of another model runs —
and the main rank says so (a WARNING naming both), and the sidecar records the architecture."""

import logging

from harness.cli import run
from harness.settings import spec_for

from parallel_wan.weights.layout import describe_checkpoint

SMALL = {"steps": 1, "num_frames": 1, "height": 32, "width": 32}


def test_the_record_and_the_log_name_the_checkpoints_architecture_and_the_presets(tiny_t2v, caplog):
    from parallel_wan.pipeline.checkpoint import architecture_record, log_architecture

    caplog.set_level(logging.INFO, logger="parallel_wan")
    ckpt = describe_checkpoint(tiny_t2v.official)
    same, other = (
        spec_for(f"checkpoint_dir={tiny_t2v.official}"),
        spec_for("model=wan2.2_t2v_a14b_lightning", f"checkpoint_dir={tiny_t2v.official}"),
    )
    assert architecture_record(same, ckpt) == {
        "name": "tiny",
        "preset": "tiny",
        "matches_preset": True,
        "dim": 128,
        "num_layers": 2,
        "num_attention_heads": 8,
        "ffn_dim": 256,
        "in_channels": 16,
        "vae_z_dim": 16,
    }
    record = architecture_record(other, ckpt)
    assert (record["name"], record["preset"], record["matches_preset"]) == ("tiny", "wan2.2_t2v_a14b", False)
    logger = logging.getLogger("parallel_wan")
    saved = logger.propagate
    logger.propagate = True  # run.setup_logging may have turned it off in this process
    try:
        log_architecture(same, ckpt)
        log_architecture(other, ckpt)
    finally:
        logger.propagate = saved
    levels = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "parallel_wan"]
    assert levels[0][0] == logging.INFO and levels[0][1].startswith("architecture: the tiny architecture (dim 128")
    assert (
        levels[1][0] == logging.WARNING
        and "model=wan2.2_t2v_a14b_lightning is a preset for wan2.2_t2v_a14b" in levels[1][1]
    )


def test_an_a14b_preset_on_another_checkpoint_says_which_architecture_ran(tiny_t2v, tmp_path):
    out = run(tmp_path / "out", tiny_t2v.diffusers, model="wan2.2_t2v_a14b", **SMALL)
    assert out["sidecar"]["checkpoint"]["architecture"]["name"] == "tiny"
    assert out["sidecar"]["checkpoint"]["architecture"]["matches_preset"] is False
    warned = [line for line in out["stderr"].splitlines() if "is a preset for" in line]
    assert len(warned) == 1, out["stderr"]
    for words in (
        "model=wan2.2_t2v_a14b is a preset for wan2.2_t2v_a14b (dim 5120, 40 layers",
        "the tiny architecture (dim 128, 2 layers",
        "checkpoint's configs are used",
    ):
        assert words in warned[0], warned[0]


def test_every_registered_architecture_is_told_apart():
    from parallel_wan.models.known_architecture import identify
    from parallel_wan.models.registry import ARCHITECTURES

    assert {name: identify(a.transformer, a.vae) for name, a in ARCHITECTURES.items()} == {
        name: name for name in ARCHITECTURES
    }
