"""The HTTP process of a server: rank 0 starts it (server.py) with the listening socket and one
JSON line on stdin, and it serves the API (app.py) until rank 0 ends — its stdin closes then,
however rank 0 ended (kill -9 included).

Why a process and not a thread of rank 0: the denoising loop takes the GIL back after every
torch op, so any Python thread answering requests beside it makes it wait (measured on CPU, 50
clients polling every 100 ms: 1.3–2.5× slower steps with a thread; BENCHMARKS.md "Serving").
Everything the two share goes through the store — jobs, DELETEs, progress, health — and the
metrics through prometheus-client's multiprocess files. It never touches a device — the device's
memory for the planner's check comes from rank 0 — and never imports jax (torch only for the
built-in tiny model's configs, on the CPU)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import threading


def main() -> None:
    import uvicorn

    from ..entry import setup_logging
    from .app import make_app
    from .auth import api_key
    from .metrics import ServerMetrics
    from .served import serve_start
    from .settings import ServerSettings
    from .store import Store

    config = json.loads(sys.stdin.readline())
    setup_logging()
    settings = ServerSettings(**config["settings"])
    served = serve_start(
        config["raw"],
        config["world"],
        config["node_size"],
        settings.videos_dir,
        config["device"],
        lora_dir=settings.lora_dir,
        check_loras=False,  # checked by the server's start, which started this process
    )
    served = dataclasses.replace(served, aliases=tuple(settings.served_model_names))  # the names requests may give
    store, claimant = Store(settings.database), config["claimant"]

    def health():
        return store.health(claimant)

    app = make_app(store, served, settings, health, ServerMetrics(store, health), api_key())
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2)
    )
    threading.Thread(target=_end_with_rank_0, args=(server,), daemon=True, name="rank-0-watch").start()
    server.run(sockets=[socket.socket(fileno=config["fd"])])


def _end_with_rank_0(server) -> None:
    sys.stdin.read()  # returns at EOF: rank 0 is gone
    server.should_exit = True
    threading.Timer(5.0, os._exit, (0,)).start()  # a request that hangs does not keep the port


if __name__ == "__main__":
    main()
