"""What one entry writes around `pipeline.generate` (which makes the frames), for the batch runner
and the server alike: the run's log line, the progress bar, the video files with their JSON
sidecar, and the TIMING SUMMARY line."""

from __future__ import annotations

import logging
import os
import sys

from ..config import RunSpec
from ..errors import OutputWriteError

log = logging.getLogger("parallel_wan")


def progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    def wrap(iterable):
        # a resumed loop runs range(step, stop): the bar starts at the step it resumes from, so it
        # ends at total/total (it ended at 22/30 after a resume from step 8)
        initial = iterable.start if isinstance(iterable, range) else 0
        return tqdm(
            iterable, total=total, initial=initial, desc="denoise", unit="step", disable=not enabled, file=sys.stderr
        )

    return wrap


def log_run(spec: RunSpec, backend) -> None:
    count = spec.mesh.world_size
    unit = (
        ("device" if count == 1 else "devices")
        if backend.single_controller
        else ("process" if count == 1 else "processes")
    )
    memory = spec.memory.mode + (
        f" (swap_prefetch_steps={spec.memory.swap_prefetch_steps})" if spec.memory.mode == "swap" else ""
    )
    log.info(
        "model=%s task=%s %dx%d×%d frames, %d steps, dtype=%s, backend=%s, device=%s, mesh=%s (%d %s), memory=%s",
        spec.model.name,
        spec.model.task,
        spec.video.width,
        spec.video.height,
        spec.video.num_frames,
        spec.sampling.steps,
        spec.execution.dtype,
        spec.execution.backend,
        backend.device,
        spec.mesh.name,
        count,
        unit,
        memory,
    )
    a = spec.video.animate
    if a is not None:
        plan = a.plan(spec.video.num_frames)
        log.info(
            "animate mode=%s: pose_video's %d frames in %d segment(s) of %d frames (num_frames), each after the "
            "first continuing from the last %d (prev_segment_frames)",
            a.mode,
            a.frames,
            plan.segments,
            plan.segment_frames,
            plan.prev_frames,
        )


def write_generation(spec: RunSpec, gen, extra: dict | None = None, stem: str = "video") -> dict:
    """The mp4(s) and the JSON sidecar STEM.json of a finished generation, atomically; returns
    the paths written. `extra`: more sidecar records (a job's entry, resumed_from_step)."""
    from .. import __version__
    from ..report.outputs import save_generation

    sidecar = {
        "parallel_wan": __version__,
        "config": spec.to_dict(),
        "seed": spec.video.seed,
        "timings_s": gen.timings,
        **gen.info,
        **(extra or {}),
        "frames_shape": list(gen.frames.shape),
    }
    cache = gen.info.get("cache") or {}
    if "measured_ratios" in cache:  # cache.calibrate=true: the curve, in the official format
        from ..caching.magcache_calibration import write_curve

        sidecar["cache"] = {**cache, "ratios_file": str(write_curve(spec.output.dir, cache["measured_ratios"]))}
    try:
        paths = save_generation(
            spec.output.dir,
            gen.videos,
            spec.model.fps,
            sidecar,
            spec.output.save_frames,
            stem=stem,
            audio=spec.video.s2v.audio if spec.video.s2v is not None else None,
        )
    except OSError as exc:  # full disk, I/O error: save_generation has removed what it wrote
        raise OutputWriteError(
            f"could not write the outputs to output_dir={spec.output.dir} ({exc.strerror or exc}); "
            "nothing was kept; free space there or set another output_dir"
        ) from exc
    if "ratios_file" in (sidecar.get("cache") or {}):
        curve = sidecar["cache"]["ratios_file"]
        log.info(
            "cache.calibrate=true: the measured MagCache curve (%d ratios) is in %s; use it with cache=magcache "
            "cache.ratios=%s",
            len(cache["measured_ratios"]),
            curve,
            curve,
        )
    return paths


def gen_summary(gen, paths) -> str:
    from ..report.timing import timing_summary

    phases = {k: v for k, v in gen.timings.items() if k != "total"}
    where = (
        paths["video"]
        if len(paths["videos"]) == 1
        else f"{len(paths['videos'])} videos in {os.path.dirname(paths['video'])}"
    )
    extra = {"video": where}
    cache = gen.info.get("cache")
    if cache:
        skipped = ", ".join(f"{name} {len(steps)}" for name, steps in cache["skipped"].items())
        extra["cache"] = (
            f"{cache['kind']}: skipped {skipped} of {len(gen.info['timesteps'])} steps; "
            f"{cache['block_forwards']}/{cache['block_forwards_dense']} block forwards"
        )
    return timing_summary(phases, gen.timings["total"], extra)
