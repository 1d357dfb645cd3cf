"""Starting a server and how it ends, on every rank.

Order (every entry point's: entry/started.py, with the HTTP side added): join the job → check
the start settings (one line, exit 2) → start the world and the backend → rank 0 binds the
port, opens the store and starts the HTTP process (http_process.py; GET /health answers 503
until the model is loaded) — and every rank learns whether that worked → load once → the
worker's loop (worker.py).

Endings: SIGTERM/SIGUSR1 on any rank — the running job stops after its step on every rank, its
loop state is saved and it goes back to the queue; exit 75 (a signal between jobs: exit 75 too,
nothing to save). A failure that is not a job's (a rank gone, a collective timing out): the
reason in one line; the running job goes back to the queue at the next claim of any server of
this storage_dir and runs again from the start; exit 1.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
import threading
import uuid

from ..errors import RunError
from ..jobs.preemption import PREEMPTED_EXIT, Preempted
from .settings import ServerSettings

log = logging.getLogger("parallel_wan")


def serve(settings: ServerSettings, raw: dict, why: str | None = None) -> None:
    from ..backends.process import check_device
    from ..entry import refusal, started_process
    from .served import serve_start

    def checks(process):
        served = serve_start(raw, process.world, process.node_size, settings.videos_dir, lora_dir=settings.lora_dir)
        check_device(served.base, process.local_rank, process.world)
        return served

    with started_process(raw, why) as started:
        served = started.check(checks)
        started.say_choices(served.base)
        backend = started.backend(served.base)
        http = Http(settings, served) if backend.leader else None
        problem = backend.same_on_every_rank(http.start() if http else None)
        if problem is not None:  # the port is taken, the store cannot open: one line, exit 2
            _exit(refusal(problem, speaks=backend.leader), started.process.count)
        try:
            _serve(settings, served, backend, http)
        except BaseException as exc:
            _end(exc, http, started.process)


def _serve(settings, served, backend, http) -> None:
    from ..jobs.preemption import PreemptionFlag
    from ..pipeline.checkpoint import load
    from .worker import Worker

    flag = PreemptionFlag().install()
    with tempfile.TemporaryDirectory(prefix="parallel_wan_tiny_") as tiny_dir, backend.inference_mode():
        loaded, ckpt = load(served.base, backend, served.ckpt, tiny_dir)
        worker = Worker(
            served,
            settings,
            backend,
            flag,
            ckpt,
            loaded,
            *((http.store, http.claimant, http.metrics, http.check) if http else ()),
        )
        if http:
            http.worker = worker
            worker.say_batching()  # the planner's answer before the first job, not between jobs
            http.ready()
            count = served.base.mesh.world_size
            unit = ("device" if backend.single_controller else "rank") + ("" if count == 1 else "s")
            log.info(
                "ready: model=%s, %d %s; POST /v1/videos on http://%s:%d",
                served.model,
                count,
                unit,
                settings.host,
                http.port,
            )
        worker.run()


class Http:
    """Rank 0's side: the port, the store, the HTTP process (http_process.py), the lease."""

    def __init__(self, settings: ServerSettings, served):
        self.settings, self.served = settings, served
        self.claimant = uuid.uuid4().hex
        self.worker = None
        self.port = settings.port
        self.process = None
        self.stopped = threading.Event()

    def start(self) -> str | None:
        """Bind, open the store, start the HTTP process; a one-line problem (the port is taken,
        the database cannot be opened) or None. Every rank waits for the answer."""
        try:
            return self._start()
        except Exception as exc:  # sqlite3 errors (a read-only or locked database), an unwritable storage_dir
            return (
                f"storage_dir={self.settings.storage_dir}: the server cannot start there ({type(exc).__name__}: {exc})"
            )

    def _start(self) -> str | None:
        import dataclasses
        import json
        import subprocess

        from .metrics import FOLDER_ENV, LoopMetrics
        from .store import Store

        try:
            sock = socket.socket(socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.settings.host, self.settings.port))
            sock.listen(2048)
        except OSError as exc:
            return (
                f"host={self.settings.host} port={self.settings.port}: cannot listen there ({exc.strerror or exc}); "
                "pick another port= (another server may hold it)"
            )
        self.port = sock.getsockname()[1]
        os.makedirs(self.settings.videos_dir, exist_ok=True)
        try:
            self.store = Store(self.settings.database, keep_s=self.settings.keep_s)
        except Exception as exc:
            if not self.settings.queue_url:
                raise
            from .databases import queue_for

            where = queue_for(self.settings.queue_url).describe()  # the URL without its password
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            return (
                f"queue_url={where}: the server cannot use that PostgreSQL database ({reason}); check the host, "
                "port, user, password and database name, and that the server is up"
            )
        self.store.retain()  # keep_hours= (or none) for every finished video, made before or after
        back = self.store.register(self.claimant, f"{socket.gethostname()}:{self.port}")
        if back:
            log.info(
                "%d job(s) this server was running when it stopped are queued again: %s", len(back), ", ".join(back)
            )
        # The loop's metrics and the HTTP process's meet in files there (metrics.py); set before
        # prometheus_client is first imported in this process, inherited by the HTTP process.
        self.metrics_dir = tempfile.mkdtemp(prefix="parallel_wan_metrics_")
        os.environ[FOLDER_ENV] = self.metrics_dir
        self.metrics = LoopMetrics()
        served = self.served
        config = {
            "fd": sock.fileno(),
            "settings": dataclasses.asdict(self.settings),
            "raw": served.raw,
            "world": served.world,
            "node_size": served.node_size,
            "device": served.device,
            "claimant": self.claimant,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "parallel_wan.serve.http_process"],
            stdin=subprocess.PIPE,
            pass_fds=(sock.fileno(),),
            text=True,
        )
        self.process.stdin.write(json.dumps(config) + "\n")
        self.process.stdin.flush()  # stdin stays open: its end tells the HTTP process that rank 0 is gone
        sock.close()
        threading.Thread(target=self._lease, daemon=True, name="lease").start()
        log.info(
            "serving on http://%s:%d (storage_dir=%s); the model loads now, GET /health says when it is ready",
            self.settings.host,
            self.port,
            self.settings.storage_dir,
        )
        return None

    def check(self) -> None:
        """Raise when the HTTP process has ended: a server nobody can reach must not go on."""
        code = self.process.poll()
        if code is not None:
            raise RuntimeError(f"the HTTP process ended (exit code {code}); the server stops")

    def ready(self) -> None:
        self.store.set_health(self.claimant, True)

    def _lease(self) -> None:
        while not self.stopped.wait(self.settings.lease_s / 6):
            try:
                self.store.heartbeat(self.claimant)
            except (
                Exception
            ) as exc:  # a locked or full disk: the next beat may pass; a lapse only lets another server retry
                log.warning("the lease could not be renewed: %s", exc)

    def stop(self, problem: str | None) -> None:
        """The loop ended: /health says why; the running job goes back to the queue when its
        state was saved (`problem` None); the HTTP process ends."""
        import shutil

        self.stopped.set()
        try:
            self.store.set_health(self.claimant, False, problem or "the server is stopping")
            if self.worker is not None and self.worker.current is not None and problem is None:
                for video_id in self.worker.current:  # their states are saved: a restart resumes them
                    self.store.requeue(video_id)
            self.store.leave(self.claimant)
        except Exception:  # the disk itself may be what failed
            pass
        if self.process is not None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except Exception:
                self.process.kill()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)


def _end(exc: BaseException, http: Http | None, process) -> None:
    from ..entry import fail
    from .worker import StopServing

    preempted = isinstance(exc, (Preempted, StopServing))
    if http is not None:
        current = http.worker.current if http.worker else None
        http.stop(None if preempted else f"{type(exc).__name__}: {exc}")
        if not preempted and current is not None:  # its claim was given up with the lease (Http.stop)
            print(
                f"parallel_wan: the server stops while running {', '.join(current)}; it runs again from the start at "
                "the next claim of a server of this storage_dir (this one started again, or another)",
                file=sys.stderr,
                flush=True,
            )
    if isinstance(exc, StopServing):
        if process.rank == 0:
            print(f"parallel_wan: {exc}; exit code {PREEMPTED_EXIT}", file=sys.stderr, flush=True)
        _exit(PREEMPTED_EXIT, process.count)
    if not preempted and process.count > 1 and not isinstance(exc, (KeyboardInterrupt, SystemExit, RunError)):
        print(
            f"parallel_wan: rank {process.rank}/{process.count}: a collective failed or a rank is gone; the server "
            "stops (exit 1)",
            file=sys.stderr,
            flush=True,
        )
    fail(exc, process.rank, process.count)


def _exit(code: int, count: int) -> None:
    if count > 1:
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
