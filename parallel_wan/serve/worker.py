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
from dataclasses import dataclass, field

from ..config import ConfigError
from ..errors import OutputWriteError, RunError
from ..jobs.batch import batch_key, batch_sizes, largest_batch, member
from ..jobs.batch_run import generate_batch
from ..jobs.job import Entry, Job
from ..jobs.keys import result_key
from ..jobs.one_entry import check_saved_states, generate_entry, reload_experts, save_state
from ..jobs.resume import drop_state
from ..pipeline.text_sources import EncodedOnDemand
from .files import VARIANT_FILES, delete_files, variant_path
from .previews import BatchPreview, ServerPreview, write_variants
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
        self.current: tuple | None = None  # the jobs running now (rank 0 requeues them on a signal)
        self.lora = lora_identity(served.base)  # the LoRAs merged into the loaded experts
        self.done = 0
        self.filling: _Filling | None = None  # rank 0: a batch claimed and still filling (batch_wait_s)
        self.fits: dict = {}  # (batch key, bound) → the largest batch this mesh and device run
        if backend.encodes_text:  # each request's texts encoded when its job runs; the encoder stays loaded
            loaded.texts = EncodedOnDemand(loaded.text_encoder)

    def run(self) -> None:
        """Jobs until a signal: then Preempted (from the running job, its state saved) or
        StopServing (between jobs)."""
        while True:
            if self.backend.any_rank(self.flag.raised):
                raise StopServing(f"stopped ({self.flag.name}) between jobs")
            jobs = self.backend.same_on_every_rank(self._next() if self.backend.leader else None)
            if jobs is not None:
                self.current = tuple(job["id"] for job in jobs)
                if len(jobs) == 1:
                    self._run(jobs[0])
                else:
                    self._run_batch(jobs)
                self.current = None

    def _next(self) -> list[dict] | None:
        """Rank 0: the next job claimed — with max_batch > 1, with the jobs queued behind it that
        may run with it (batch.py) —, or None after waiting up to IDLE_S for one (a look at the
        queue every POLL_S; a claim, which takes the write lock, only when something is there).
        A batch still filling (batch_wait_s) is None too: it goes on filling at the next call, so
        the ranks' hand-over and signal vote still come every IDLE_S however long it waits."""
        self.check()
        for deleted in self.store.deleting():  # files a DELETE left behind (a crash in between)
            self._remove(deleted)
        for expired in self.store.expire():  # keep_hours=: finished videos past their expires_at
            self._remove(expired)
            self.metrics.jobs.labels("expired").inc()
            log.info("%s: expired (keep_hours): its video and record are deleted", expired)
        if self.filling is None:
            row = self._claim()
            if row is None:
                return None
            settings = json.loads(row["settings"])
            spec, step = self._checked(row, settings)
            if spec is None or not row.get("batch_key") or self.settings.max_batch == 1:
                return self._started([row])
            most = self._batch_size(row["batch_key"], spec, self.settings.max_batch)
            self.filling = _Filling([row], spec, step, most, time.monotonic() + self.settings.batch_wait_s)
            self.current = (row["id"],)  # claimed: a signal before it runs sends it back to the queue
        rows = self._fill(self.filling)
        if rows is None:
            return None
        self.filling = None
        return self._started(rows)

    def _claim(self) -> dict | None:
        lease = self.settings.lease_s  # another server silent this long loses its running job to this one
        row, deadline = self.store.claim(self.claimant, lease), time.monotonic() + IDLE_S
        while row is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
            if self.store.has_queued():
                row = self.store.claim(self.claimant, lease)
        if row is not None:
            self.metrics.queue_wait_seconds.observe(max(0.0, time.time() - row["created_at"]))
        return row

    def _started(self, rows: list[dict]) -> list[dict]:
        for claimed in rows:
            log.info("%s: started (%s)", claimed["id"], claimed["prompt"][:60])
        if len(rows) > 1:
            log.info("batch of %d: %s", len(rows), ", ".join(claimed["id"] for claimed in rows))
        return [{"id": claimed["id"], "settings": json.loads(claimed["settings"])} for claimed in rows]

    def _checked(self, row: dict, settings: dict):
        """(the job's spec, the step its saved state resumes from or None); (None, None) for
        settings that no longer resolve (every rank finds the same in _run; the job fails). A
        state saved under other settings (another mesh) is dropped: the job starts over."""
        try:
            spec = self.served.spec(settings)
        except ConfigError:
            return None, None
        try:
            found = check_saved_states(Job((Entry(row["id"], spec, result_key(spec)),), self.served.videos_dir))
        except ConfigError as exc:
            log.info("%s: %s; starting it over", row["id"], exc)
            drop_state(self.served.videos_dir, row["id"])
            found = {}
        return spec, found.get(row["id"])

    def _fill(self, filling: _Filling) -> list[dict] | None:
        """More queued jobs of the batch's key saved after the same step (or none saved), in queue
        order, for up to IDLE_S; the batch once it is full or its batch_wait_s is over — as many
        as the mesh and the memory take (_batch_size), the ones beyond going back to the queue
        where they stood — else None (still filling)."""
        key, deadline = filling.rows[0]["batch_key"], min(filling.until, time.monotonic() + IDLE_S)

        def same_step(row: dict) -> bool:  # each candidate resolved once (the claim holds the write lock)
            if row["id"] not in filling.steps:
                filling.steps[row["id"]] = self._checked(row, json.loads(row["settings"]))[1]
            return filling.steps[row["id"]] == filling.step

        looked = False
        while True:
            if not looked or self.store.has_queued():  # the write lock only when something waits
                filling.rows += self.store.claim_like(self.claimant, key, filling.most - len(filling.rows), same_step)
                self.current, looked = tuple(row["id"] for row in filling.rows), True
            if len(filling.rows) >= filling.most or time.monotonic() >= filling.until:
                break
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)
        size = self._batch_size(key, filling.spec, len(filling.rows))
        for extra in filling.rows[size:]:
            self.store.requeue(extra["id"])
        return filling.rows[:size]

    def _batch_size(self, key: str, spec, most: int) -> int:
        """The largest batch of at most `most` jobs like `spec` this mesh splits and this device
        holds (batch.largest_batch), asked once per batch key and bound."""
        if (key, most) not in self.fits:
            self.fits[(key, most)] = largest_batch(spec, self.served.ckpt, self.served.device, most)
        return self.fits[(key, most)]

    def say_batching(self) -> None:
        """Rank 0, once ready: what max_batch= gives jobs like the start settings."""
        most, base = self.settings.max_batch, self.served.base
        if most == 1:
            return
        key = batch_key(base)
        if key is None:
            log.info("max_batch=%d: the start settings run a step cache; such jobs run alone", most)
            return
        log.info(
            "max_batch=%d: jobs like the start settings run together %d at most (sizes mesh=%s splits: %s; "
            "the planner's fit on this device); batch_wait_s=%g",
            most,
            self._batch_size(key, base, most),
            base.mesh.name,
            ", ".join(map(str, batch_sizes(base.mesh, most))),
            self.settings.batch_wait_s,
        )

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
        if main:
            self.metrics.batch_size.observe(1)
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
                self._preview(entry),
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

    def _run_batch(self, jobs: list[dict]) -> None:
        """Jobs that run through the denoiser together (batch.py), each written as it would be
        alone. A DELETE of one stops the batch after its step: the others' states are saved and
        they go back to the queue where they stood, to resume together at once."""
        main, entries = self.backend.leader, []
        for job in jobs:
            try:
                spec = self.served.spec(job["settings"])  # every rank: the same words, the same checks
            except ConfigError as exc:
                if main:
                    self._finish(job["id"], "failed", error=str(exc))
                continue
            entries.append(Entry(job["id"], spec, result_key(spec)))
        if len(entries) not in batch_sizes(self.served.base.mesh, len(entries)):
            for job in jobs:  # what is left does not split over dp: one at a time
                if any(entry.name == job["id"] for entry in entries):
                    self._run(job)
            return
        ids = tuple(entry.name for entry in entries)
        job = Job(tuple(entries), self.served.videos_dir)
        self._experts_for(entries[0].spec, ids[0])
        if main:
            self.metrics.batch_size.observe(len(entries))
        try:
            gen, resumed, states = generate_batch(
                job,
                entries,
                self.ckpt,
                self.loaded,
                self.backend,
                self.flag,
                self._stop_vote(*ids),
                self._progress(*ids) if main else None,
                BatchPreview([self._preview(e, row) for row, e in enumerate(entries)]),
            )
        except RunError as exc:  # non-finite latents: these jobs fail, the server goes on
            if main:
                for video_id in ids:
                    self._finish(video_id, "failed", error=str(exc))
            return
        finally:
            self.done += 1
        if states is not None:
            self._part_batch(job, entries, states)
            return
        if main:
            for i, entry in enumerate(entries):
                self._write(entry.spec, member(gen, i, len(entries)), entry.name, resumed, timed=i == 0)

    def _preview(self, entry: Entry, row: int = 0) -> ServerPreview:
        video = entry.spec.video
        return ServerPreview(self.backend, self.store, self.settings, entry.name, video.height, video.width, row)

    def _part_batch(self, job: Job, entries: list, states: list) -> None:
        """A batch stopped for the DELETE of some of its members: the others' states saved, they
        go back to the queue; the deleted ones' files removed."""
        cancelled = self.backend.same_on_every_rank(
            [e.name for e in entries if self.store.cancel_requested(e.name)] if self.backend.leader else None
        )
        for entry, state in zip(entries, states):
            if entry.name not in cancelled:
                save_state(job, entry, state, self.backend, self.flag, preempted=False)
        if not self.backend.leader:
            return
        step = states[0].step
        for entry in entries:
            if entry.name in cancelled:
                self.store.stopped_for_delete(entry.name)
                self._remove(entry.name)
                self.metrics.jobs.labels("deleted").inc()
                log.info("%s: deleted: stopped after step %d of %d", entry.name, step, entry.spec.sampling.steps)
            else:
                self.store.requeue(entry.name)
                log.info("%s: a job of its batch was deleted; it goes on from step %d", entry.name, step)

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

    def _write(self, spec, gen, video_id: str, resumed: int | None, timed: bool = True) -> None:
        """The job's files and its completion; `timed`: its phases go to the metrics (a batch's
        once, with its first member)."""
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
        for phase, seconds in gen.timings.items() if timed else ():
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

    def _stop_vote(self, *video_ids: str):
        """After each step: stop when any rank saw a signal or (rank 0) a job was deleted."""
        backend, flag, store = self.backend, self.flag, self.store

        def should_stop() -> bool:
            cancelled = store is not None and any(store.cancel_requested(video_id) for video_id in video_ids)
            return backend.any_rank(flag.raised or cancelled)

        return should_stop

    def _progress(self, *video_ids: str):
        """Rank 0's progress wrapper around the steps: the store learns each step as it ends, for
        every job of the batch."""
        store, seconds, counted = self.progress_store, self.metrics.step_seconds, self.metrics.steps

        def watch(steps):
            steps = iter(steps)
            first = next(steps, None)
            if first is None:
                return
            if first:
                for video_id in video_ids:  # resumed: progress starts where the state was saved
                    store.progress(video_id, first)
            t0, i = time.perf_counter(), first
            while i is not None:
                yield i
                now = time.perf_counter()
                seconds.observe(now - t0)
                counted.inc()
                for video_id in video_ids:
                    store.progress(video_id, i + 1)
                t0, i = now, next(steps, None)

        return watch


@dataclass
class _Filling:
    """A batch the leader has begun: the jobs claimed, what they share, how many it takes, and
    until when (time.monotonic()) it waits for more."""

    rows: list
    spec: object
    step: int | None
    most: int
    until: float
    steps: dict = field(default_factory=dict)  # a candidate's id → the step it resumes from (None: fresh)


def lora_identity(spec) -> tuple:
    """What decides the merged weights: each LoRA's expert role, file and strength, in order."""
    return tuple((role, path, scale) for role, path, scale, _ in spec.weights.loras)


class StopServing(Exception):
    """A signal between jobs: nothing to save; the server exits 75."""
