"""The loop every rank runs once the model is loaded: one job at a time, in order.

Rank 0 claims the next job from the store and hands it to every rank (`same_on_every_rank`: the
job's id and its settings as words, which each rank resolves itself); with nothing to do it
sends "nothing" every IDLE_S, which keeps the other ranks' wait short of any collective timeout
and finds a dead rank. Before every hand-over the ranks vote on a signal (`any_rank`), so a
SIGTERM to an idle server stops every rank too.

A job runs through the jobs' one run path (jobs/one_entry.generate_entry → pipeline.generate): it
resumes from a saved loop state, and after every step all ranks vote whether to stop — a signal
on any rank (the state is saved, Preempted: exit 75) or a DELETE of the job, which rank 0 reads
from the store at that vote and nowhere else, so HTTP traffic never reaches into the loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

from ..config import ConfigError
from ..errors import OutputWriteError, RunError
from ..jobs.job import Entry, Job
from ..jobs.keys import result_key
from ..jobs.one_entry import check_saved_states, generate_entry, reload_experts
from ..jobs.resume import drop_state
from ..pipeline.text_sources import EncodedOnDemand
from .files import VARIANT_FILES, delete_files, variant_path
from .previews import ServerPreview, write_variants
from .store import Store

log = logging.getLogger("parallel_wan")

IDLE_S = 0.5
POLL_S = 0.05


class Worker:
    def __init__(
        self, served, settings, backend, flag, ckpt, loaded, store=None, claimant=None, metrics=None, check=None
    ):
        """`settings`: the ServerSettings; `store`, `claimant`, `metrics` (LoopMetrics) and `check()`
        (raises when the HTTP process is gone): rank 0's (None on the other ranks)."""
        self.served, self.settings, self.backend, self.flag = served, settings, backend, flag
        self.ckpt, self.loaded = ckpt, loaded
        self.store, self.claimant, self.metrics, self.check = store, claimant, metrics, check
        self.progress_store = None if store is None else Store(store.path, durable=False)
        self.current: str | None = None  # the job running now (rank 0 requeues it on a signal)
        self.lora = lora_identity(served.base)  # the LoRAs merged into the loaded experts
        self.done = 0
        if backend.encodes_text:  # each request's texts encoded when its job runs; the encoder stays loaded
            loaded.texts = EncodedOnDemand(loaded.text_encoder)

    def run(self) -> None:
        """Jobs until a signal: then Preempted (from the running job, its state saved) or
        StopServing (between jobs)."""
        while True:
            if self.backend.any_rank(self.flag.raised):
                raise StopServing(f"stopped ({self.flag.name}) between jobs")
            job = self.backend.same_on_every_rank(self._next() if self.backend.leader else None)
            if job is not None:
                self.current = job["id"]
                self._run(job)
                self.current = None

    def _next(self) -> dict | None:
        """Rank 0: the next job claimed, or None after waiting up to IDLE_S for one (a look at the
        queue every POLL_S; a claim, which takes the write lock, only when something is there)."""
        self.check()
        for deleted in self.store.deleting():  # files a DELETE left behind (a crash in between)
            self._remove(deleted)
        for expired in self.store.expire():  # keep_hours=: finished videos past their expires_at
            self._remove(expired)
            self.metrics.jobs.labels("expired").inc()
            log.info("%s: expired (keep_hours): its video and record are deleted", expired)
        lease = self.settings.lease_s  # another server silent this long loses its running job to this one
        row, deadline = self.store.claim(self.claimant, lease), time.monotonic() + IDLE_S
        while row is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
            if self.store.has_queued():
                row = self.store.claim(self.claimant, lease)
        if row is None:
            return None
        self.metrics.queue_wait_seconds.observe(max(0.0, time.time() - row["created_at"]))
        settings = json.loads(row["settings"])
        try:
            spec = self.served.spec(settings)
        except ConfigError:
            spec = None  # every rank finds the same in _run, and the job fails there
        if spec is not None:
            try:
                check_saved_states(Job((Entry(row["id"], spec, result_key(spec)),), self.served.videos_dir))
            except ConfigError as exc:  # a state saved under other settings (another mesh): start over
                log.info("%s: %s; starting it over", row["id"], exc)
                drop_state(self.served.videos_dir, row["id"])
        log.info("%s: started (%s)", row["id"], row["prompt"][:60])
        return {"id": row["id"], "settings": settings}

    def _run(self, job: dict) -> None:
        video_id, main = job["id"], self.backend.leader
        try:
            spec = self.served.spec(job["settings"])  # every rank: the same words, the same checks
        except ConfigError as exc:  # settings the server started with since changed under it
            if main:
                self._finish(video_id, "failed", error=str(exc))
            return
        entry = Entry(video_id, spec, result_key(spec))
        self._experts_for(spec, video_id)
        try:
            gen, resumed = generate_entry(
                Job((entry,), self.served.videos_dir),
                entry,
                self.ckpt,
                self.loaded,
                self.backend,
                self.flag,
                self._stop_vote(video_id),
                self._progress(video_id) if main else None,
                ServerPreview(self.backend, self.store, self.settings, video_id, spec.video.height, spec.video.width),
            )
        except RunError as exc:  # non-finite latents: this job fails, the server goes on
            if main:
                self._finish(video_id, "failed", error=str(exc))
            return
        finally:
            self.done += 1
        if not main:
            return
        if gen.state is not None:  # stopped for a DELETE
            self.store.stopped_for_delete(video_id)
            self._remove(video_id)
            self.metrics.jobs.labels("deleted").inc()
            log.info("%s: deleted: stopped after step %d of %d", video_id, gen.state.step, spec.sampling.steps)
            return
        self._write(spec, gen, video_id, resumed)

    def _experts_for(self, spec, video_id: str) -> None:
        """The experts as this job needs them. Its LoRAs (lora_dir=, chosen per request) differ
        from those merged now: the experts are loaded again with them — from the page cache, by
        the one load path, so a job renders exactly what the command line does with those LoRAs,
        and a job without any exactly what a server that never had one does; the old experts are
        dropped first, so the device never holds two copies. memory=swap reloads between videos
        anyway (it freed an expert during the last one)."""
        wanted = lora_identity(spec)
        switch = wanted != self.lora
        if not switch and not (self.done and spec.memory.mode == "swap"):
            return
        started = time.perf_counter()
        if switch:
            self.loaded.experts = {}  # the old weights go before the new ones come
        self.loaded = reload_experts(spec, self.backend, self.ckpt, self.loaded)
        self.lora = wanted
        if switch and self.backend.leader:
            seconds = time.perf_counter() - started
            self.metrics.lora_switch_seconds.observe(seconds)
            names = ", ".join(f"{os.path.basename(path)}×{scale:g} ({role})" for role, path, scale in wanted) or "none"
            log.info("%s: LoRAs now %s (the experts loaded again in %.1f s)", video_id, names, seconds)

    def _write(self, spec, gen, video_id: str, resumed: int | None) -> None:
        from ..jobs.entry_outputs import write_generation

        extra = {"id": video_id}
        if resumed is not None:
            extra["resumed_from_step"] = resumed
        try:
            paths = write_generation(spec, gen, extra, stem=video_id)
        except OutputWriteError as exc:  # a full disk: this job fails, nothing of it kept; the server goes on
            log.error("%s: %s", video_id, exc)
            reason = exc.__cause__.strerror if isinstance(exc.__cause__, OSError) else None
            self._finish(
                video_id,
                "failed",
                error=f"the server could not write the video ({reason or 'an I/O error'}); nothing of it was kept; "
                "ask again once its storage has room",
            )
            return
        except RunError as exc:  # another output problem: this job fails, the server goes on
            self._finish(video_id, "failed", error=str(exc))
            return
        drop_state(self.served.videos_dir, video_id)
        try:
            write_variants(self.settings, video_id, gen.frames)  # the final thumbnail and spritesheet
        except OSError as exc:  # the mp4 is whole: the job completes, its variants answer 404
            log.warning("%s: the thumbnail and spritesheet could not be written (%s)", video_id, exc)
        with open(paths["sidecar"]) as f:
            record = json.load(f)
        for phase, seconds in gen.timings.items():
            if phase != "total":
                self.metrics.phase_seconds.labels(phase).observe(seconds)
        self._finish(video_id, "completed", record=record, resumed_from_step=resumed)
        log.info(
            "%s: completed (%.1f s%s)",
            video_id,
            gen.timings.get("total", 0.0),
            f", resumed from step {resumed}" if resumed is not None else "",
        )

    def _finish(self, video_id: str, status: str, **details) -> None:
        if not self.store.finish(video_id, status, **details):  # a DELETE came first, however late
            self._remove(video_id)
            self.metrics.jobs.labels("deleted").inc()
            log.info("%s: deleted while it was being %s", video_id, "written" if status == "completed" else "failed")
            return
        self.metrics.jobs.labels(status).inc()
        if status == "failed":
            for variant in VARIANT_FILES:  # a preview of a video that never came
                with contextlib.suppress(FileNotFoundError):
                    os.remove(variant_path(self.settings, video_id, variant))
            log.info("%s: failed: %s", video_id, details.get("error"))

    def _remove(self, video_id: str) -> None:
        """A deleted job's files (video, sidecar, frames, upload, saved state), then its tombstone only."""
        delete_files(self.settings, video_id)
        self.store.gone(video_id)

    def _stop_vote(self, video_id: str):
        """After each step: stop when any rank saw a signal or (rank 0) the job was deleted."""
        backend, flag, store = self.backend, self.flag, self.store

        def should_stop() -> bool:
            cancelled = store is not None and store.cancel_requested(video_id)
            return backend.any_rank(flag.raised or cancelled)

        return should_stop

    def _progress(self, video_id: str):
        """Rank 0's progress wrapper around the steps: the store learns each step as it ends."""
        store, seconds = self.progress_store, self.metrics.step_seconds

        def watch(steps):
            steps = iter(steps)
            first = next(steps, None)
            if first is None:
                return
            if first:
                store.progress(video_id, first)  # resumed: progress starts where the state was saved
            t0, i = time.perf_counter(), first
            while i is not None:
                yield i
                now = time.perf_counter()
                seconds.observe(now - t0)
                store.progress(video_id, i + 1)
                t0, i = now, next(steps, None)

        return watch


def lora_identity(spec) -> tuple:
    """What decides the merged weights: each LoRA's expert role, file and strength, in order."""
    return tuple((role, path, scale) for role, path, scale, _ in spec.weights.loras)


class StopServing(Exception):
    """A signal between jobs: nothing to save; the server exits 75."""
