"""The queue and every job's record: one SQLite database in storage_dir (WAL, synchronous=FULL).
A job is committed to disk before the HTTP reply that accepts it is sent, so nothing accepted
is lost; several servers may share the file (8 GPUs as two meshes of 4).

Claiming is one IMMEDIATE transaction (SQLite's write lock): the first queued job in order
becomes `in_progress` under the claimant's id, so each job is claimed by exactly one server.
A server renews its lease (`servers.heartbeat`) while it lives; a job whose claimant stopped
renewing, or whose claimant was an earlier start of this same server (host:port, which only
one process can hold), goes back to the queue where it stood — a job interrupted by kill -9
runs again; one stopped by SIGTERM resumes from its saved loop state (jobs/resume.py).

A DELETE hides the job at once (GET, content and lists answer as if it never was; the API has
no `cancelled` status) and keeps a tombstone — the row's id and place, the request's text
dropped — so that a list cursor naming it stays valid. A job not running is `deleting` at once;
a running one is asked to stop (cancel_requested) and becomes `deleting` when its server stops
it after the step, or when it finishes: `finish` then reports the delete instead of completing,
so a DELETE during the decode wins. `deleting` rows are the ones whose files may remain; who
removes the files marks them `deleted` (`gone`), and a server sweeps up any left by a crash.

Retention (keep_hours=): a finished job gets `expires_at`; from then on it is hidden as a deleted
one is, and a server's sweep turns it into a tombstone and removes its files. Backpressure
(max_queued=): `add` refuses a new job while that many wait (QueueFull), inside the same write
transaction, so servers sharing the file never let more in between them.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
import uuid

from .databases import queue_for

log = logging.getLogger("parallel_wan")

STATUSES = ("queued", "in_progress", "completed", "failed")  # the API's; a client sees no other
FINISHED = ("completed", "failed")
# a row a client sees: one of the API's statuses and no DELETE asked for (deleting/deleted: tombstones)
# (retention: a finished job past its expires_at is gone at once, before the sweep removes it)
VISIBLE = (
    "status IN ('queued', 'in_progress', 'completed', 'failed') AND cancel_requested = 0 "
    "AND (expires_at IS NULL OR expires_at > {NOW})"
)
# a tombstone keeps its id and place (seq) for list cursors; nothing of the request
STRIP = (
    "prompt = '', settings = '{}', record = NULL, error = NULL, idempotency_key = NULL, request_sha256 = NULL, "
    '"user" = NULL, metadata = NULL'
)
LEASE_S = 60.0  # a claimant silent this long is gone (heartbeats every LEASE_S / 6)
MAX_ATTEMPTS = 3  # a job that took its server down this often fails instead of running again

# A job whose server is gone: back to the queue, or deleting when a DELETE had asked it to stop.
ORPHAN_UPDATE = "status = CASE cancel_requested WHEN 1 THEN 'deleting' ELSE 'queued' END, claimant = NULL"

SCHEMA = """
CREATE TABLE IF NOT EXISTS videos (
    seq {SEQ},
    id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt TEXT NOT NULL,
    size TEXT NOT NULL,
    seconds TEXT NOT NULL,
    settings TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    request_sha256 TEXT,
    created_at {BIG} NOT NULL,
    started_at {BIG},
    completed_at {BIG},
    step INTEGER NOT NULL DEFAULT 0,
    steps INTEGER NOT NULL,
    claimant TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    record TEXT,
    resumed_from_step INTEGER,
    "user" TEXT,
    metadata TEXT,
    preview_wanted INTEGER NOT NULL DEFAULT 0,
    preview_step INTEGER,
    remixed_from TEXT,
    expires_at {BIG},
    batch_key TEXT
);
CREATE INDEX IF NOT EXISTS videos_status ON videos (status, seq);
CREATE TABLE IF NOT EXISTS servers (
    claimant TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    started_at {REAL} NOT NULL,
    heartbeat {REAL} NOT NULL,
    ready INTEGER NOT NULL DEFAULT 0,
    problem TEXT
);
"""


# columns newer than the first databases, added to those when a server opens them
COLUMNS_ADDED = {
    '"user"': "TEXT",  # quoted: a reserved word in PostgreSQL
    "metadata": "TEXT",
    "preview_wanted": "INTEGER NOT NULL DEFAULT 0",
    "preview_step": "INTEGER",
    "remixed_from": "TEXT",
    "expires_at": "{BIG}",
    "batch_key": "TEXT",
}
RETRY_S = 120.0  # a lost database connection (PostgreSQL restarting) is tried again this long
RECENT = 20  # finished jobs whose run time says when a place in a full queue frees up
DEFAULT_WAIT_S = 30  # Retry-After before any job has finished


class IdempotencyConflict(Exception):
    """An Idempotency-Key already used for another request."""


class QueueFull(Exception):
    """max_queued jobs wait already; `retry_after`: seconds until one likely starts."""

    def __init__(self, queued: int, retry_after: int):
        super().__init__(f"{queued} jobs are queued")
        self.queued, self.retry_after = queued, retry_after


class UnknownCursor(ValueError):
    """A list's `after` naming no job this store ever had."""


def new_id() -> str:
    return f"video_{uuid.uuid4().hex}"


def is_id(text: str) -> bool:
    """Ids are the only names files get: `video_` and 32 hex digits, nothing else."""
    return len(text) == 38 and text.startswith("video_") and all(c in "0123456789abcdef" for c in text[6:])


def _retried(method):
    """Run a store operation again, on a new connection, while the database is out of reach
    (queue_url: PostgreSQL restarting, the network down) — each is one transaction, so a try cut
    off midway changed nothing — up to RETRY_S, then raise. SQLite: one try."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        deadline, pause = time.monotonic() + RETRY_S, 0.1
        while True:
            try:
                return method(self, *args, **kwargs)
            except self.queue.lost as exc:
                self.queue.forget()
                if time.monotonic() > deadline:
                    raise
                log.warning("the queue's database is out of reach (%s); trying again", str(exc).strip()[:200])
                time.sleep(pause)
                pause = min(2 * pause, 2.0)

    return run


def _every_operation_retried(cls):
    for name, value in list(vars(cls).items()):
        if callable(value) and not name.startswith("_"):
            setattr(cls, name, _retried(value))
    return cls


@_every_operation_retried
class Store:
    def __init__(self, location: str, durable: bool = True, keep_s: int | None = None):
        """`location`: the SQLite file, or a queue_url (postgresql://…; databases.py).
        `durable=False`: commits are not synced to disk one by one (a WAL checkpoint does it) —
        for the loop's progress, written after every step, which a crash may lose harmlessly.
        `keep_s`: a job that finishes through this store expires that long after (keep_hours=)."""
        self.path, self.durable, self.keep_s = location, durable, keep_s
        self.queue = queue_for(location, durable)
        self.queue.script(SCHEMA)  # each CREATE … IF NOT EXISTS
        with self.queue.write() as db:  # a database made before a column existed gains it
            for column, kind in COLUMNS_ADDED.items():
                self.queue.add_column(db, column, kind.replace("{BIG}", self.queue.words["BIG"]))
        self._db().execute("CREATE INDEX IF NOT EXISTS videos_expiry ON videos (expires_at)")  # after the column

    def _db(self):
        return self.queue.connection()

    def _write(self, claim: bool = False):
        return self.queue.write(claim)

    # ------------------------------------------------------------------ requests
    def add(
        self,
        video: dict,
        idempotency_key: str | None = None,
        request_sha256: str | None = None,
        max_queued: int | None = None,
    ) -> tuple[dict, bool]:
        """Queue `video` (id, model, prompt, size, seconds, settings, steps; user and metadata if
        given); (its row as queued, True). With
        an Idempotency-Key seen before: (that job's row, False), or IdempotencyConflict when the
        key came with another request. QueueFull when `max_queued` jobs wait already (a retry of
        an accepted request is still answered: it adds nothing)."""
        with self._write() as db:
            if idempotency_key is not None:
                row = db.execute("SELECT * FROM videos WHERE idempotency_key = ?", (idempotency_key,)).fetchone()
                if row is not None:
                    if row["request_sha256"] != request_sha256:
                        raise IdempotencyConflict(idempotency_key)
                    return dict(row), False
            if max_queued is not None:
                waiting = f"SELECT COUNT(*) AS n FROM videos WHERE status = 'queued' AND {VISIBLE}"
                queued = db.execute(waiting).fetchone()["n"]
                if queued >= max_queued:
                    raise QueueFull(queued, self._wait_s(db, queued - max_queued + 1))
            if db.execute("SELECT 1 FROM videos WHERE id = ?", (video["id"],)).fetchone() is not None:
                return self.get(video["id"]), True  # a try whose commit was made but whose answer was lost
            db.execute(
                "INSERT INTO videos (id, status, model, prompt, size, seconds, settings, idempotency_key, "
                'request_sha256, created_at, steps, "user", metadata, remixed_from, batch_key) '
                "VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    video["id"],
                    video["model"],
                    video["prompt"],
                    video["size"],
                    video["seconds"],
                    json.dumps(video["settings"]),
                    idempotency_key,
                    request_sha256,
                    int(time.time()),
                    video["steps"],
                    video.get("user"),
                    None if video.get("metadata") is None else json.dumps(video["metadata"]),
                    video.get("remixed_from"),
                    video.get("batch_key"),
                ),
            )
            # Read before the commit (get() uses this connection): after it a server may
            # already have claimed the job, and the creator's answer is the job as queued.
            return self.get(video["id"]), True

    @staticmethod
    def _wait_s(db, places: int) -> int:
        """Seconds until `places` queued jobs have started: the recent jobs' mean run time over
        the servers alive, per place (Retry-After; 30 s before any job finished)."""
        runs = [
            r["run"]
            for r in db.execute(
                "SELECT completed_at - started_at AS run FROM videos WHERE status IN ('completed', 'failed') "
                "AND started_at IS NOT NULL AND completed_at IS NOT NULL ORDER BY completed_at DESC LIMIT ?",
                (RECENT,),
            )
        ]
        if not runs:
            return DEFAULT_WAIT_S
        since = (time.time() - LEASE_S,)
        alive = db.execute("SELECT COUNT(*) AS n FROM servers WHERE heartbeat > ?", since).fetchone()["n"]
        return max(1, math.ceil(sum(runs) / len(runs) * places / max(alive, 1)))

    def get(self, video_id: str) -> dict | None:
        """The job as a client may see it (None: no such job, or deleted)."""
        row = self._db().execute(f"SELECT * FROM videos WHERE id = ? AND {VISIBLE}", (video_id,)).fetchone()
        return None if row is None else dict(row)

    def row(self, video_id: str) -> dict | None:
        """The row whatever its state, tombstones included (the worker's and the tests' look)."""
        row = self._db().execute("SELECT * FROM videos WHERE id = ?", (video_id,)).fetchone()
        return None if row is None else dict(row)

    def page(self, limit: int, after: str | None = None, order: str = "desc") -> tuple[list[dict], bool]:
        """Up to `limit` jobs after the one named `after`, newest first (`order=desc`) or oldest;
        (rows, whether more follow). `after` may name a deleted job (its tombstone keeps its place,
        so a client paging while jobs are deleted sees no job twice and skips none); one this store
        never had raises UnknownCursor."""
        db, sign, direction = self._db(), ("<" if order == "desc" else ">"), ("DESC" if order == "desc" else "ASC")
        where, args = f"WHERE {VISIBLE}", []
        if after is not None:
            row = db.execute("SELECT seq FROM videos WHERE id = ?", (after,)).fetchone()
            if row is None:
                raise UnknownCursor(after)
            where, args = f"{where} AND seq {sign} ?", [row["seq"]]
        rows = db.execute(
            f"SELECT * FROM videos {where} ORDER BY seq {direction} LIMIT ?", [*args, limit + 1]
        ).fetchall()
        return [dict(r) for r in rows[:limit]], len(rows) > limit

    def delete(self, video_id: str) -> str | None:
        """DELETE of a job; the status it had (None: no such job, or deleted before). It is hidden
        at once. One not running becomes `deleting` (the caller removes its files, then `gone`); a
        running one is asked to stop — its server's loop reads that at its next step vote and
        removes what it wrote."""
        with self._write() as db:
            row = db.execute(f"SELECT status FROM videos WHERE id = ? AND {VISIBLE}", (video_id,)).fetchone()
            if row is None:
                return None
            if row["status"] == "in_progress":
                # the key is free at once: a retry after the DELETE is a new request
                db.execute(
                    "UPDATE videos SET cancel_requested = 1, idempotency_key = NULL, request_sha256 = NULL "
                    "WHERE id = ?",
                    (video_id,),
                )
            else:
                db.execute(f"UPDATE videos SET status = 'deleting', {STRIP} WHERE id = ?", (video_id,))
            return row["status"]

    def deleting(self) -> list[str]:
        """Deleted jobs whose files may remain (a crash between the DELETE and the removal)."""
        return [r["id"] for r in self._db().execute("SELECT id FROM videos WHERE status = 'deleting'")]

    def gone(self, video_id: str) -> None:
        """A deleted job's files are removed: only its tombstone is left."""
        with self._write() as db:
            db.execute("UPDATE videos SET status = 'deleted' WHERE id = ? AND status = 'deleting'", (video_id,))

    def counts(self) -> dict:
        rows = self._db().execute(f"SELECT status, COUNT(*) AS n FROM videos WHERE {VISIBLE} GROUP BY status")
        return {status: 0 for status in STATUSES} | {r["status"]: r["n"] for r in rows.fetchall()}

    # ------------------------------------------------------------------ the worker (rank 0)
    def register(self, claimant: str, name: str) -> list[str]:
        """This server's start: its lease, and every job an earlier start of the same server
        (`name`, host:port) left in progress goes back to the queue. Returns their ids."""
        now = time.time()
        with self._write() as db:
            earlier = [
                r["claimant"]
                for r in db.execute("SELECT claimant FROM servers WHERE name = ? AND claimant != ?", (name, claimant))
            ]
            ids = []
            for old in earlier:
                ids += [
                    r["id"]
                    for r in db.execute("SELECT id FROM videos WHERE status = 'in_progress' AND claimant = ?", (old,))
                ]
                db.execute(f"UPDATE videos SET {ORPHAN_UPDATE} WHERE status = 'in_progress' AND claimant = ?", (old,))
                db.execute("DELETE FROM servers WHERE claimant = ?", (old,))
            db.execute(
                "INSERT INTO servers (claimant, name, started_at, heartbeat) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (claimant) DO UPDATE SET name = excluded.name, started_at = excluded.started_at, "
                "heartbeat = excluded.heartbeat",
                (claimant, name, now, now),
            )
        return ids

    def set_health(self, claimant: str, ready: bool, problem: str | None = None) -> None:
        """What GET /health says for this server: loaded and every rank there, or the problem."""
        with self._write() as db:
            db.execute("UPDATE servers SET ready = ?, problem = ? WHERE claimant = ?", (int(ready), problem, claimant))

    def health(self, claimant: str) -> tuple[bool, str | None]:
        row = self._db().execute("SELECT ready, problem FROM servers WHERE claimant = ?", (claimant,)).fetchone()
        if row is None:
            return False, "the server is stopping"
        return bool(row["ready"]) and row["problem"] is None, row["problem"]

    def has_queued(self) -> bool:
        """A cheap look (no lock) before a claim."""
        return self._db().execute("SELECT 1 FROM videos WHERE status = 'queued' LIMIT 1").fetchone() is not None

    def heartbeat(self, claimant: str) -> None:
        with self._write() as db:
            db.execute("UPDATE servers SET heartbeat = ? WHERE claimant = ?", (time.time(), claimant))

    def leave(self, claimant: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM servers WHERE claimant = ?", (claimant,))

    def claim(self, claimant: str, lease_s: float = LEASE_S) -> dict | None:
        """The first queued job, now in progress under `claimant` (None: the queue is empty).
        Jobs of claimants silent for `lease_s` go back to the queue first; a job claimed
        MAX_ATTEMPTS times already fails instead."""
        now = time.time()
        with self._write(claim=True) as db:
            db.execute(
                f"UPDATE videos SET {ORPHAN_UPDATE} WHERE status = 'in_progress' AND (claimant IS NULL OR "
                "claimant NOT IN (SELECT claimant FROM servers WHERE heartbeat > ?))",
                (now - lease_s,),
            )
            while True:
                row = db.execute(
                    "SELECT * FROM videos WHERE status = 'queued' ORDER BY seq LIMIT 1 {SKIP_LOCKED}"
                ).fetchone()
                if row is None:
                    return None
                if row["attempts"] < MAX_ATTEMPTS:
                    break
                error = (
                    f"the server stopped {row['attempts']} times while running this job (a rank died, or it "
                    "was killed); not tried again"
                )
                db.execute(
                    "UPDATE videos SET status = 'failed', completed_at = ?, error = ? WHERE id = ?",
                    (int(now), error, row["id"]),
                )
            db.execute(
                "UPDATE videos SET status = 'in_progress', claimant = ?, attempts = attempts + 1, "
                "started_at = ?, cancel_requested = 0 WHERE id = ? AND status = 'queued'",
                (claimant, int(now), row["id"]),
            )
        return self.get(row["id"])

    def claim_like(self, claimant: str, batch_key: str, limit: int, accept) -> list[dict]:
        """Up to `limit` more queued jobs of `batch_key` (jobs/batch.py: they may run in one batch
        with a job claimed already), in queue order, each one `accept(row)` takes now in progress
        under `claimant`."""
        now, taken = time.time(), []
        with self._write(claim=True) as db:
            rows = db.execute(
                "SELECT * FROM videos WHERE status = 'queued' AND batch_key = ? AND attempts < ? ORDER BY seq "
                "LIMIT ? {SKIP_LOCKED}",
                (batch_key, MAX_ATTEMPTS, 4 * limit),
            ).fetchall()
            for row in rows:
                if len(taken) == limit:
                    break
                if not accept(dict(row)):
                    continue
                db.execute(
                    "UPDATE videos SET status = 'in_progress', claimant = ?, attempts = attempts + 1, "
                    "started_at = ?, cancel_requested = 0 WHERE id = ? AND status = 'queued'",
                    (claimant, int(now), row["id"]),
                )
                taken.append(row["id"])
        return [row for row in map(self.get, taken) if row is not None]

    def progress(self, video_id: str, step: int) -> None:
        with self._write() as db:
            db.execute("UPDATE videos SET step = ? WHERE id = ?", (step, video_id))

    def want_preview(self, video_id: str) -> None:
        """A client asked a running job for a preview: its loop makes one after its next step."""
        with self._write() as db:
            db.execute("UPDATE videos SET preview_wanted = 1 WHERE id = ? AND status = 'in_progress'", (video_id,))

    def preview_wanted(self, video_id: str) -> bool:
        row = self._db().execute("SELECT preview_wanted FROM videos WHERE id = ?", (video_id,)).fetchone()
        return row is not None and bool(row["preview_wanted"])

    def previewed(self, video_id: str, step: int) -> None:
        with self._write() as db:
            db.execute("UPDATE videos SET preview_wanted = 0, preview_step = ? WHERE id = ?", (step, video_id))

    def cancel_requested(self, video_id: str) -> bool:
        row = self._db().execute("SELECT cancel_requested FROM videos WHERE id = ?", (video_id,)).fetchone()
        return row is None or bool(row["cancel_requested"])  # a row deleted meanwhile: stop too

    def finish(
        self,
        video_id: str,
        status: str,
        *,
        record: dict | None = None,
        error: str | None = None,
        resumed_from_step: int | None = None,
    ) -> bool:
        """The job completed or failed — unless a DELETE came first, however late (while it
        decoded or wrote its files): then it is `deleting` and False says so; the caller removes
        its files and calls `gone`."""
        assert status in FINISHED, status
        now = int(time.time())
        with self._write() as db:
            if self._deleted_meanwhile(db, video_id):
                return False
            db.execute(
                "UPDATE videos SET status = ?, completed_at = ?, record = ?, error = ?, resumed_from_step = ?, "
                "expires_at = ? WHERE id = ?",
                (
                    status,
                    now,
                    None if record is None else json.dumps(record),
                    error,
                    resumed_from_step,
                    None if self.keep_s is None else now + self.keep_s,
                    video_id,
                ),
            )
        return True

    # ------------------------------------------------------------------ retention
    def retain(self) -> None:
        """At a server's start: its keep_hours= for every finished job (kept forever without
        one), so a changed setting applies to the videos made before it too."""
        with self._write() as db:
            if self.keep_s is None:
                db.execute("UPDATE videos SET expires_at = NULL WHERE expires_at IS NOT NULL")
            else:
                db.execute(
                    "UPDATE videos SET expires_at = completed_at + ? WHERE status IN ('completed', 'failed')",
                    (self.keep_s,),
                )

    def expire(self) -> list[str]:
        """Finished jobs past their expires_at become `deleting` tombstones (the caller removes
        their files, then `gone`); their ids. One cheap read when none has expired."""
        now = int(time.time())
        if self._db().execute("SELECT 1 FROM videos WHERE expires_at <= ? LIMIT 1", (now,)).fetchone() is None:
            return []
        with self._write() as db:
            ids = [
                r["id"]
                for r in db.execute(
                    "SELECT id FROM videos WHERE expires_at <= ? AND status IN ('completed', 'failed')", (now,)
                )
            ]
            db.execute(
                f"UPDATE videos SET status = 'deleting', expires_at = NULL, {STRIP} "
                "WHERE expires_at <= ? AND status IN ('completed', 'failed')",
                (now,),
            )
        return ids

    def stopped_for_delete(self, video_id: str) -> None:
        """The loop stopped the job for its DELETE: `deleting` until its files are removed."""
        with self._write() as db:
            self._deleted_meanwhile(db, video_id)

    @staticmethod
    def _deleted_meanwhile(db, video_id: str) -> bool:
        row = db.execute("SELECT cancel_requested FROM videos WHERE id = ?", (video_id,)).fetchone()
        if row is None or not row["cancel_requested"]:
            return False
        db.execute(f"UPDATE videos SET status = 'deleting', claimant = NULL, {STRIP} WHERE id = ?", (video_id,))
        return True

    def requeue(self, video_id: str) -> None:
        """Back to the queue where it stood (SIGTERM: its loop state is saved; a restart resumes it).
        The stop was planned, so it does not count as an attempt. A job deleted meanwhile is not
        queued again: it is `deleting` (the next server's sweep removes its saved state)."""
        with self._write() as db:
            db.execute(
                f"UPDATE videos SET {ORPHAN_UPDATE}, attempts = {{GREATEST}}(attempts - 1, 0) "
                "WHERE id = ? AND status = 'in_progress'",
                (video_id,),
            )
