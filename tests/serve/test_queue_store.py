"""The queue's store on both databases it runs on — the SQLite file (the default) and PostgreSQL
(`queue_url=`, a throwaway cluster of Debian's postgresql: harness/postgres.py): the same
operations, the same answers. Claims by competing processes take each job exactly once and in
order (PostgreSQL: FOR UPDATE SKIP LOCKED); a restarted server takes back its jobs, a silent
one's after its lease; max_queued and keep_hours. PostgreSQL only: a restart of the database
while a store is in use costs a retry, not an operation; a wrong password is one line at the
server's start."""

import json
import subprocess
import sys
import uuid

import psycopg
import pytest
from harness.paths import ENV
from harness.postgres import running

from parallel_wan.serve.store import QueueFull, Store


@pytest.fixture(scope="module")
def cluster():
    with running() as pg:
        yield pg


def fresh_database(cluster) -> str:
    """The URL of a new, empty database of the cluster."""
    name = f"q_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return cluster.url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def queue_at(request, tmp_path, cluster):
    """Where a fresh queue is: a SQLite file, or a new PostgreSQL database."""
    return str(tmp_path / "q.sqlite3") if request.param == "sqlite" else fresh_database(cluster)


def job(i: int) -> dict:
    return {"id": f"video_{i:032x}", "model": "tiny", "prompt": "p", "size": "64x64", "seconds": "1", "steps": 4} | {
        "settings": {}
    }


def test_each_job_is_claimed_exactly_once_by_competing_processes(queue_at):
    store = Store(queue_at)
    ids = [store.add(job(i))[0]["id"] for i in range(40)]
    claimer = (
        "import sys, json; from parallel_wan.serve.store import Store\n"
        "s = Store(sys.argv[1]); s.register(sys.argv[2], sys.argv[2]); got = []\n"
        "while (row := s.claim(sys.argv[2])) is not None: got.append(row['id'])\n"
        "print(json.dumps(got))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", claimer, queue_at, name], env=ENV, stdout=subprocess.PIPE, text=True)
        for name in ("a", "b", "c")
    ]
    claims = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert sorted(i for got in claims for i in got) == ids  # every job once, none twice
    assert all(got == sorted(got) for got in claims)  # in order


def test_the_creators_answer_is_the_job_as_queued_even_when_a_server_claims_it_at_once(queue_at, monkeypatch):
    """A server's worker may claim a job between the creator's commit and its answer; the answer
    is still the queued job (progress 0), as OpenAI's create returns it."""
    import contextlib

    store, worker = Store(queue_at), Store(queue_at)
    worker.register("worker", "host:1")
    write, claimed = store.queue.write, []

    @contextlib.contextmanager
    def commit_then_the_worker_claims(claim=False):
        with write(claim) as db:
            yield db
        if not claimed:  # the creator's commit: the worker wins the race
            claimed.append(worker.claim("worker"))

    monkeypatch.setattr(store.queue, "write", commit_then_the_worker_claims)
    row, created = store.add(job(7))
    assert claimed[0]["id"] == row["id"] and store.get(row["id"])["status"] == "in_progress"
    assert created and row["status"] == "queued" and row["step"] == 0 and row["claimant"] is None


def test_a_restarted_server_takes_back_its_jobs_and_a_silent_ones_after_its_lease(queue_at):
    store = Store(queue_at)
    ids = [store.add(job(i))[0]["id"] for i in range(4)]
    store.register("first", "host:8000")
    store.register("other", "host:8001")
    assert store.claim("first")["id"] == ids[0]
    assert store.claim("other")["id"] == ids[1]
    assert store.register("second", "host:8000") == [ids[0]]  # the same host:port started again
    assert store.claim("second")["id"] == ids[0]
    assert store.get(ids[0])["attempts"] == 2
    assert store.claim("other")["id"] == ids[2]
    assert store.claim("second")["id"] == ids[3]
    assert store.claim("second") is None  # "other" renews its lease: its jobs stay its own
    store.delete(ids[2])  # a DELETE reaches the database …
    store._db().execute("UPDATE servers SET heartbeat = 0 WHERE claimant = 'other'")  # … and "other" falls silent
    assert store.claim("second")["id"] == ids[1]  # its job runs again here
    assert store.row(ids[2])["status"] == "deleting"  # the deleted one is not run again …
    assert store.deleting() == [ids[2]]  # … and the next server's sweep removes what it left
    assert store.get(ids[3])["status"] == "in_progress"
    store.requeue(ids[3])  # SIGTERM: back where it stood, the planned stop not counted
    assert (store.get(ids[3])["status"], store.get(ids[3])["attempts"]) == ("queued", 0)


def test_lists_deletes_idempotency_bounds_and_expiry(queue_at):
    from parallel_wan.serve.store import IdempotencyConflict, UnknownCursor

    store = Store(queue_at, keep_s=3600)
    first, created = store.add(job(1), "key", "sha-a")
    assert created and store.add(job(9), "key", "sha-a") == (first, False)  # a retry: the same job
    with pytest.raises(IdempotencyConflict):
        store.add(job(9), "key", "sha-b")
    store.add(job(2))
    with pytest.raises(QueueFull) as full:
        store.add(job(3), max_queued=2)
    assert (full.value.queued, full.value.retry_after) == (2, 30)
    assert [r["id"] for r in store.page(10)[0]] == [job(2)["id"], job(1)["id"]]
    assert store.delete(job(2)["id"]) == "queued" and store.get(job(2)["id"]) is None
    assert store.page(10, after=job(2)["id"])[0][0]["id"] == job(1)["id"]  # a deleted job's cursor holds
    with pytest.raises(UnknownCursor):
        store.page(10, after=job(5)["id"])
    store.register("s", "host:1")
    claimed = store.claim("s")
    assert store.finish(claimed["id"], "completed", record={"a": 1})
    done = store.get(claimed["id"])
    assert done["expires_at"] == done["completed_at"] + 3600 and json.loads(done["record"]) == {"a": 1}
    store._db().execute("UPDATE videos SET expires_at = 0 WHERE id = ?", (claimed["id"],))
    assert store.get(claimed["id"]) is None and store.expire() == [claimed["id"]]
    assert store.counts() == {"queued": 0, "in_progress": 0, "completed": 0, "failed": 0}


def test_a_postgresql_restart_costs_a_retry_not_an_operation(cluster):
    """The database restarts between two operations of a store in use: the next one opens a new
    connection and goes on; nothing accepted is lost."""
    store = Store(fresh_database(cluster))
    store.add(job(1))
    cluster.stop()
    cluster.start()
    assert store.add(job(2))[1] and [r["id"] for r in store.page(10)[0]] == [job(2)["id"], job(1)["id"]]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_wrong_password_or_url_is_one_line_at_the_servers_start(tmp_path):
    """queue_url= the server cannot use: it stops at start with one line naming the setting and
    the database (never the password) and the reason, and exits 2; a URL that is not
    PostgreSQL's is refused before anything starts."""
    with running(password="right-password") as guarded:
        for url, words in (
            (guarded.url.replace("right-password", "wrong-password"), "password authentication failed"),
            (f"postgresql://wan:right-password@127.0.0.1:{guarded.port}/no_such_db", 'database "no_such_db"'),
            ("mysql://wan@127.0.0.1/q", "is not a PostgreSQL URL"),
        ):
            done = subprocess.run(
                [sys.executable, "-m", "parallel_wan.serve", "model=tiny", "port=0", f"storage_dir={tmp_path / 's'}"]
                + [f"queue_url={url}"],
                env=ENV,
                capture_output=True,
                text=True,
                timeout=300,
            )
            lines = [line for line in done.stderr.splitlines() if "queue_url=" in line]
            assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr[-2000:]
            assert "right-password" not in lines[0] and "wrong-password" not in lines[0], lines[0]
