"""Where the queue lives: one SQLite file in storage_dir (the default: replicas on one host), or a
PostgreSQL database (`queue_url=postgresql://…`: replicas on several hosts). store.py writes its
SQL once, with `?` placeholders and three words each database spells its own way; an adapter
here turns it into that database's, opens one connection per thread, and runs a write
transaction the way the store needs it:

- SQLite: BEGIN IMMEDIATE — the file's write lock, so every write transaction runs alone;
- PostgreSQL: a transaction that first takes one transaction-scoped advisory lock — the same
  one-at-a-time for the store's writes (a count then an insert under max_queued, a server's
  registration) — except a claim, which takes no lock but picks its job with `FOR UPDATE SKIP
  LOCKED`, so servers claiming at once each get another job and never wait for each other.

A PostgreSQL connection lost (the server restarted, the network dropped) is opened again on the
next use; the store retries the operation it was in (store.py `_retried`)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading

WRITE_LOCK = 0x70A1_3A17  # the advisory lock every PostgreSQL write transaction but a claim takes


class Translated:
    """A connection that takes the store's SQL: `?` placeholders and {WORD}s in this database's
    spelling."""

    def __init__(self, db, queue):
        self.db, self.queue = db, queue

    def execute(self, sql: str, args=()):
        for word, spelled in self.queue.words.items():
            sql = sql.replace("{" + word + "}", spelled)
        if self.queue.placeholder == "?":
            return self.db.execute(sql, args)
        return self.db.execute(sql.replace("?", self.queue.placeholder), tuple(args) or None)  # None: no % parsing


class SqliteQueue:
    placeholder = "?"
    words = {
        "NOW": "CAST(strftime('%s', 'now') AS INTEGER)",
        "GREATEST": "MAX",
        "SEQ": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "SKIP_LOCKED": "",
        "BIG": "INTEGER",
        "REAL": "REAL",
    }
    lost = ()  # errors that mean the connection is gone: none for a file

    def __init__(self, path: str, durable: bool = True):
        self.path, self.durable = path, durable
        self._local = threading.local()

    def describe(self) -> str:
        return self.path

    def connection(self) -> Translated:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'NORMAL'}")  # FULL: on disk before the reply
            db.execute("PRAGMA busy_timeout=30000")
            self._local.db = db
        return Translated(db, self)

    def forget(self) -> None:
        self._local.db = None

    @contextlib.contextmanager
    def write(self, claim: bool = False):
        """BEGIN IMMEDIATE … COMMIT (ROLLBACK on an exception): the write lock for the whole block."""
        db = self.connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def script(self, sql: str) -> None:
        for statement in filter(str.strip, sql.split(";")):
            self.connection().execute(statement)

    def add_column(self, db, column: str, kind: str) -> None:
        if column.strip('"') not in {r["name"] for r in db.execute("PRAGMA table_info(videos)")}:
            try:
                db.execute(f"ALTER TABLE videos ADD COLUMN {column} {kind}")
            except sqlite3.OperationalError:  # another server added it meanwhile
                pass


class PostgresQueue:
    placeholder = "%s"
    words = {
        "NOW": "CAST(EXTRACT(EPOCH FROM now()) AS BIGINT)",
        "GREATEST": "GREATEST",
        "SEQ": "BIGSERIAL PRIMARY KEY",
        "SKIP_LOCKED": "FOR UPDATE SKIP LOCKED",
        "BIG": "BIGINT",
        "REAL": "DOUBLE PRECISION",
    }

    def __init__(self, url: str, durable: bool = True):
        import psycopg

        self.url, self.durable = url, durable
        self.lost = (psycopg.OperationalError, psycopg.InterfaceError)
        self._local = threading.local()

    def describe(self) -> str:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(self.url)  # never the password
        where = f"{info.get('host', '')}:{info.get('port', 5432)}/{info.get('dbname', '')}"
        return f"postgresql://{info.get('user', '')}@{where}"

    def connection(self):
        import psycopg
        from psycopg.rows import dict_row

        db = getattr(self._local, "db", None)
        if db is None or db.closed or db.broken:  # (first use, or lost: opened again)
            db = psycopg.connect(self.url, autocommit=True, row_factory=dict_row, connect_timeout=10)
            if not self.durable:  # the loop's progress: a crash may lose the last one harmlessly
                db.execute("SET synchronous_commit = off")
            self._local.db = db
        return Translated(db, self)

    def forget(self) -> None:
        db = getattr(self._local, "db", None)
        self._local.db = None
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()

    @contextlib.contextmanager
    def write(self, claim: bool = False):
        db = self.connection()
        with db.db.transaction():
            if not claim:
                db.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
            yield db

    def script(self, sql: str) -> None:
        """The schema, once per database however many servers start at once (CREATE … IF NOT
        EXISTS alone races in PostgreSQL)."""
        with self.write() as db:
            for statement in filter(str.strip, sql.split(";")):
                db.execute(statement)

    def add_column(self, db, column: str, kind: str) -> None:
        db.execute(f"ALTER TABLE videos ADD COLUMN IF NOT EXISTS {column} {kind}")


def queue_for(location: str, durable: bool = True):
    """The adapter for a queue_url (postgresql://…) or a SQLite file's path."""
    if location.startswith(("postgresql://", "postgres://")):
        return PostgresQueue(location, durable)
    return SqliteQueue(location, durable)
