"""Step caching (issue 14) against references nobody here wrote: `python -m parallel_wan.run`
with cache=magcache / taylorseer / fbcache renders the frames diffusers' Wan pipelines render
with MagCacheConfig / TaylorSeerCacheConfig / FirstBlockCacheConfig enabled on each expert of
the same tiny checkpoint, and skips exactly the (CFG branch, step) pairs diffusers skips.

What diffusers really skipped is observed, not assumed: a forward hook on every block's FFN counts
the blocks that ran in each transformer call (the pipeline calls cond then uncond each step), so
a call with fewer than all blocks is a skipped step (MagCache: 0 blocks, FirstBlockCache: the
first block only, TaylorSeer lite: 0 blocks, proj_out predicted).
"""

import json

import numpy as np
import pytest
import torch
from harness.cli import HEIGHT, WIDTH, run
from harness.diffusers_reference import reference_frames, tiny_checkpoint
from harness.frames import assert_frames_close
from harness.images import write_png

STEPS = 8  # enough steps that every expert has something to skip
BRANCHES = ("cond", "uncond")  # the order the pipelines call the transformer in, every step
# (guidance_high, guidance_low) per model: the tiny presets' own, I2V's low one changed as in
# test_end_to_end_image so a swap would show; TI2V has one expert.
GUIDANCE = {"t2v": (4.0, 3.0), "i2v": (3.5, 3.0), "ti2v": (5.0, 5.0)}
MODEL_PRESET = {"t2v": "tiny", "i2v": "tiny_i2v", "ti2v": "tiny_ti2v"}
# A cached run must differ from the dense one by far more than MAX_ABS, or agreeing with
# diffusers' cached run would not show that the cache did anything. Measured (max |cached − dense|
# in uint8 levels, diffusers): magcache 110 / 96 / 38, taylorseer 184 / 228 / 189, fbcache
# 90 / 124 / 40 for T2V / I2V / TI2V. Our cached frames are within 1 level of diffusers' cached
# ones in all nine cases (mean 5e-5 to 1.5e-4 levels).
CACHE_MATTERS = 20

# At 8 steps the experts split 6 + 2 (T2V: shift 12, boundary 0.875) and 3 + 5 (I2V: shift 5,
# boundary 0.9); TI2V runs one expert. The skipped steps diffusers showed with the settings below
# (global 0-based steps; the same for both CFG branches unless two lists are given):
#               T2V                      I2V                             TI2V
#   magcache    1 2 5 7                  1 2 5 6                         2 3 5 6
#   taylorseer  1 3 5 7                  2 5 7                           3 5 6
#   fbcache     1 2 3 4 5 7              cond 1 2 6, uncond 1 2          cond 1 2 3 5, uncond 1 2 4 5
#
# MagCache's curve (the official format: interleaved cond/uncond ratios, 2·STEPS − 2 numbers for
# a calibration run of STEPS steps). The cond entries sit near 1 (skippable at threshold 0.06)
# except 1.08, which forces a compute where it is reached with the run not yet at K (T2V step 4,
# I2V step 4); the uncond entries are far from 1, so a run that read them would skip nothing,
# and one that cut the curve elsewhere than the run's own split would skip other steps.
MAG_COND = [0.99, 1.01, 0.98, 1.08, 1.01, 0.99, 1.02]
MAG_CURVE = [r for cond in MAG_COND for r in (cond, 0.5)]
# Per model: (threshold, max_skips K, retention); I2V with no forced zone (its 3-step high-noise
# expert skips from step 1).
MAG_SETTINGS = {"t2v": (0.06, 2, 0.2), "i2v": (0.06, 2, 0.0), "ti2v": (0.06, 2, 0.2)}
# Per model: (interval, warmup, order). diffusers computes where step < warmup or
# (step − warmup − 1) % interval == 0, counting each expert's own steps: with T2V's warmup 1 each
# expert's second step is predicted from a single computed step (order 0 only); order 2 needs
# three computed steps before a prediction, which I2V's low-noise expert (its step 4) and TI2V
# (step 3) have — running order 1 on our side alone leaves 44 (I2V) / 118 (TI2V) levels of
# difference, so the order really is compared.
TAYLOR_SETTINGS = {"t2v": (2, 1, 1), "i2v": (2, 2, 2), "ti2v": (3, 3, 2)}
# Per model: the threshold on diffusers' relative change of the first block's residual (mean
# |r − r_prev| / mean |r_prev|, fp32). With random weights that change is ~0.85-1.5 every step
# (measured), so 0.05-0.3 skips nothing and the thresholds sit near 1. Chosen so the metric is
# never within 0.005 of the threshold (closest: T2V 0.060, I2V 0.011, TI2V 0.0056; the two
# pipelines' fp32 latents differ by ~1e-6 relative), and I2V / TI2V decide differently for the
# two CFG branches.
FBC_THRESHOLD = {"t2v": 1.15, "i2v": 0.96, "ti2v": 1.01}


def experts(model):
    return [m for m in (model.transformer, model.transformer_2) if m is not None]


def high_noise_steps(model, steps):
    """How many leading steps diffusers runs `transformer` (the high-noise expert)."""
    from diffusers import UniPCMultistepScheduler

    if model.transformer_2 is None:
        return steps
    scheduler = UniPCMultistepScheduler.from_config(model.scheduler_config)
    scheduler.set_timesteps(steps)
    boundary = model.boundary_ratio * scheduler.config.num_train_timesteps
    return int(sum(t >= boundary for t in scheduler.timesteps))


def diffusers_configs(cache, kind, model, steps):
    """One diffusers cache config per expert, equivalent to our `cache=<cache>` settings."""
    from diffusers import FirstBlockCacheConfig, MagCacheConfig, TaylorSeerCacheConfig

    if cache == "magcache":
        threshold, max_skips, retention = MAG_SETTINGS[kind]
        cond = [1.0, *MAG_CURVE[0::2]]
        split = high_noise_steps(model, steps)
        slices = [(0, split), (split, steps)] if model.transformer_2 is not None else [(0, steps)]
        return [
            MagCacheConfig(
                threshold=threshold,
                max_skip_steps=max_skips,
                retention_ratio=retention,
                num_inference_steps=b - a,
                mag_ratios=cond[a:b],
            )
            for a, b in slices
        ]
    if cache == "taylorseer":
        interval, warmup, order = TAYLOR_SETTINGS[kind]
        return [
            TaylorSeerCacheConfig(
                cache_interval=interval,
                disable_cache_before_step=warmup,
                max_order=order,
                taylor_factors_dtype=torch.float32,
                use_lite_mode=True,
            )
            for _ in experts(model)
        ]
    return [FirstBlockCacheConfig(threshold=FBC_THRESHOLD[kind]) for _ in experts(model)]


def our_overrides(cache, kind, ratios_path):
    if cache == "magcache":
        threshold, max_skips, retention = MAG_SETTINGS[kind]
        return {
            "cache": "magcache",
            "cache.threshold": threshold,
            "cache.max_skips": max_skips,
            "cache.retention": retention,
            "cache.ratios": ratios_path,
        }
    if cache == "taylorseer":
        interval, warmup, order = TAYLOR_SETTINGS[kind]
        return {"cache": "taylorseer", "cache.interval": interval, "cache.warmup": warmup, "cache.order": order}
    return {"cache": "fbcache", "cache.threshold": FBC_THRESHOLD[kind]}


class BlockCounter:
    """Counts, for every transformer call of a pipeline run, the blocks whose FFN really ran."""

    def __init__(self, model):
        self.calls = []
        self.layers = model.transformer.config.num_layers
        self._handles = []
        for transformer in experts(model):
            self._handles.append(transformer.register_forward_pre_hook(lambda *_: self.calls.append(0)))
            for block in transformer.blocks:
                self._handles.append(block.ffn.register_forward_hook(self._count))

    def _count(self, *_):
        self.calls[-1] += 1

    def remove(self):
        for handle in self._handles:
            handle.remove()

    def skipped(self, steps):
        """{"cond": [steps], "uncond": [steps]} where a call ran fewer than all blocks."""
        assert len(self.calls) == steps * len(BRANCHES), self.calls
        return {
            branch: [step for step in range(steps) if self.calls[step * len(BRANCHES) + b] < self.layers]
            for b, branch in enumerate(BRANCHES)
        }


def diffusers_run(model, image, configs=None, steps=STEPS):
    """diffusers' uint8 frames, block counter and skips, with `configs[i]` enabled on expert i."""
    high, low = GUIDANCE[model.kind]
    guidance = (
        dict(guidance_scale=high) if model.transformer_2 is None else dict(guidance_scale=high, guidance_scale_2=low)
    )
    counter = BlockCounter(model)
    try:
        for transformer, config in zip(experts(model), configs or []):
            transformer.enable_cache(config)
        frames = reference_frames(model, image, steps=steps, **guidance)
    finally:
        counter.remove()
        if configs:
            for transformer in experts(model):
                transformer.disable_cache()
    return frames, counter, counter.skipped(steps)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Per kind: the tiny model, its checkpoint, the image it starts from (I2V only) and the
    dense diffusers run at STEPS steps."""
    folder = tmp_path_factory.mktemp("images")
    images = {"t2v": None, "i2v": write_png(folder / "first.png", WIDTH, HEIGHT), "ti2v": None}
    out = {}
    for kind, image in images.items():
        model, ckpt = tiny_checkpoint(kind, tmp_path_factory)
        dense, counter, skipped = diffusers_run(model, image)
        assert skipped == {"cond": [], "uncond": []} and sum(counter.calls) == STEPS * 2 * counter.layers
        out[kind] = dict(model=model, ckpt=ckpt, image=image, dense=dense)
    return out


@pytest.fixture(scope="module")
def ratios_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("magcache") / "ratios.json"
    path.write_text(json.dumps(MAG_CURVE))
    return str(path)


@pytest.mark.parametrize("cache", ["magcache", "taylorseer", "fbcache"])
@pytest.mark.parametrize("kind", ["t2v", "i2v", "ti2v"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_cached_run_matches_diffusers_cache_hooks(models, ratios_path, tmp_path, kind, cache):
    case = models[kind]
    model = case["model"]
    ref, counter, skipped = diffusers_run(model, case["image"], diffusers_configs(cache, kind, model, STEPS))
    # The reference really skipped something, and not everything.
    assert any(skipped.values()), (cache, kind, counter.calls)
    assert sum(counter.calls) < STEPS * 2 * counter.layers
    cache_effect = int(np.abs(ref.astype(np.int16) - case["dense"]).max())
    assert cache_effect > CACHE_MATTERS, (cache, kind, cache_effect)

    high, low = GUIDANCE[kind]
    overrides = dict(
        model=MODEL_PRESET[kind],
        steps=STEPS,
        guidance_high=high,
        guidance_low=low,
        **our_overrides(cache, kind, ratios_path),
    )
    if case["image"] is not None:
        overrides["image"] = case["image"]
    ours = run(tmp_path / "ours", case["ckpt"], **overrides)

    record = ours["sidecar"]["cache"]
    assert record["kind"] == cache
    assert record["skipped"] == skipped, (record["skipped"], skipped)
    assert record["block_forwards_dense"] == STEPS * 2 * counter.layers
    assert record["block_forwards"] == sum(counter.calls) < record["block_forwards_dense"]
    assert_frames_close(ours["frames"], ref)


# Video-to-video (remix, edits): the steps from 8 − int(8 · 0.75) = 2 on run, all on the low-noise
# expert (boundary 0.999), which is WanVideoToVideoPipeline's one transformer. diffusers' hooks see
# only those 6 calls per branch; MagCache's config gets the curve's entries at those steps' places
# in the 8-step schedule (cond ratios 2 … 7). FirstBlockCache's threshold sits mid-way in the range
# that skips the same steps (measured: 0.85 … 1.0 all skip run steps 1 and 4 of both branches).
V2V_STRENGTH, V2V_BEGIN = 0.75, 2
V2V_FBC_THRESHOLD = 0.92


@pytest.mark.parametrize("cache", ["magcache", "taylorseer", "fbcache"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_cached_video_to_video_matches_diffusers_cache_hooks(tiny_t2v, ratios_path, tmp_path, cache):
    from types import SimpleNamespace

    from diffusers import FirstBlockCacheConfig, MagCacheConfig
    from harness.cli import common, run_in_process
    from harness.diffusers_reference import BranchContexts, v2v_frames
    from harness.videos import write_source_video

    model, ckpt = tiny_t2v.model, tiny_t2v.diffusers
    transformer = model.transformer_2
    frames = write_source_video(tmp_path / "source.mp4")
    runs = STEPS - V2V_BEGIN
    if cache == "magcache":
        threshold, max_skips, retention = MAG_SETTINGS["t2v"]
        config = MagCacheConfig(
            threshold=threshold,
            max_skip_steps=max_skips,
            retention_ratio=retention,
            num_inference_steps=runs,
            mag_ratios=[1.0, *MAG_CURVE[0::2]][V2V_BEGIN:],
        )
        ours = our_overrides(cache, "t2v", ratios_path)
    elif cache == "taylorseer":
        config = diffusers_configs(cache, "t2v", SimpleNamespace(transformer=transformer, transformer_2=None), STEPS)[0]
        ours = our_overrides(cache, "t2v", ratios_path)
    else:
        config = FirstBlockCacheConfig(threshold=V2V_FBC_THRESHOLD)
        ours = {"cache": "fbcache", "cache.threshold": V2V_FBC_THRESHOLD}
    counter = BlockCounter(SimpleNamespace(transformer=transformer, transformer_2=None))
    transformer.enable_cache(config)
    contexts = BranchContexts(transformer)
    try:
        ref = v2v_frames(model, frames, V2V_STRENGTH, 3.0, steps=STEPS)
    finally:
        contexts.remove()
        transformer.disable_cache()
        counter.remove()
    skipped = counter.skipped(runs)
    assert any(skipped.values()) and sum(counter.calls) < runs * 2 * counter.layers, counter.calls
    dense = v2v_frames(model, frames, V2V_STRENGTH, 3.0, steps=STEPS)
    assert np.abs(ref.astype(np.int16) - dense).max() > CACHE_MATTERS  # the skips changed the video

    out = tmp_path / "ours"
    source = tmp_path / "source.mp4"
    run_in_process(
        out,
        *common(ckpt, video=source, strength=V2V_STRENGTH, boundary=0.999, guidance_low=3.0, steps=STEPS, **ours),
    )
    record = json.loads((out / "video.json").read_text())["cache"]
    assert {b: [s - V2V_BEGIN for s in steps] for b, steps in record["skipped"].items()} == skipped
    assert record["block_forwards_dense"] == runs * 2 * counter.layers  # the steps run, not the schedule's
    assert record["block_forwards"] == sum(counter.calls)
    assert_frames_close(np.load(out / "frames.npy"), ref)
