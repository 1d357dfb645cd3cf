"""The server's own settings — where it listens, where it keeps the queue and the videos — taken
out of the command line before the run settings are composed (config/compose.py knows nothing
of them, so `parallel_wan.run port=8000` is refused as an unknown setting, as it should be).

Cheap: no torch, no fastapi."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..config.checks import writable_folder
from ..config.compose import SERVER_ONLY
from ..errors import ConfigError

DEFAULTS = {
    "host": "127.0.0.1",
    "port": "8000",
    "storage_dir": "outputs/serve",
    "max_body_mb": "32",
    "served_model_names": "",
    "max_queued": "",  # unbounded
    "keep_hours": "",  # forever
    "queue_url": "",  # the SQLite file in storage_dir
    "lease_s": "60",
    "lora_dir": "",  # no LoRAs chosen per request
    "max_batch": "1",  # one job at a time
    "batch_wait_s": "0",  # a batch is what is queued when a job starts
}
SERVER_KEYS = SERVER_ONLY  # what the run's composition refuses, named there

# Run settings a server takes from each request, or that a server sets itself: refused at start.
NOT_AT_START = {
    "prompts": "a server takes its prompts from requests (POST /v1/videos); drop prompts=",
    "output_dir": "a server writes its videos under storage_dir; set storage_dir=DIR instead of output_dir=",
}


@dataclass(frozen=True)
class ServerSettings:
    host: str
    port: int  # 0: any free port (the log line "serving on" names it)
    storage_dir: str  # absolute
    max_body_mb: float  # the largest request body (an uploaded image included)
    # more names a request's `model` may give (e.g. sora-2 for apps that hard-code it): served.py names
    served_model_names: tuple = ()
    max_queued: int | None = None  # queued jobs beyond which a new request is answered 429 (None: no bound)
    keep_hours: float | None = None  # finished videos and their records are deleted this long after (None: kept)
    queue_url: str | None = None  # postgresql://…: the queue of replicas on several hosts (None: SQLite)
    lease_s: float = 60.0  # a server silent this long (no heartbeat) loses its running job to the others
    lora_dir: str | None = None  # the LoRAs a request may name (serve/lora_registry.py)
    max_batch: int = (
        1  # queued jobs that differ only in prompt, negative prompt and seed run together, this many at most
    )
    batch_wait_s: float = 0.0  # how long a claimed job waits for more of its kind to fill its batch

    @property
    def keep_s(self) -> int | None:
        return None if self.keep_hours is None else max(1, round(self.keep_hours * 3600))

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

    @property
    def videos_dir(self) -> str:
        return os.path.join(self.storage_dir, "videos")

    @property
    def inputs_dir(self) -> str:
        return os.path.join(self.storage_dir, "inputs")

    @property
    def database(self) -> str:
        """Where the queue is: queue_url, or the SQLite file in storage_dir."""
        return self.queue_url or os.path.join(self.storage_dir, "queue.sqlite3")


def split_settings(words: list[str]) -> tuple[ServerSettings, list[str]]:
    """(the server's settings, the run's key=value words) from the command line's words."""
    values, rest = dict(DEFAULTS), []
    for word in words:
        key, eq, value = word.partition("=")
        if eq and key.lstrip("+") in SERVER_KEYS:
            values[key.lstrip("+")] = value
        else:
            if eq and key.lstrip("+") in NOT_AT_START:
                raise ConfigError(f"{word}: {NOT_AT_START[key.lstrip('+')]}")
            rest.append(word)
    return server_settings(values), rest


def server_settings(values: dict) -> ServerSettings:
    host = values["host"].strip()
    if not host:
        raise ConfigError("host= is empty; set host=127.0.0.1 (this machine only) or host=0.0.0.0 (every interface)")
    try:
        port = int(values["port"])
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"port={values['port']!r} is not a TCP port; set e.g. port=8000 (0: any free port)")
    try:
        max_body = float(values["max_body_mb"])
    except ValueError:
        max_body = -1.0
    if not (math.isfinite(max_body) and max_body > 0):
        raise ConfigError(
            f"max_body_mb={values['max_body_mb']!r} must be a positive number of megabytes, e.g. max_body_mb=32"
        )
    storage = writable_folder("storage_dir", values["storage_dir"], "e.g. storage_dir=outputs/serve")
    return ServerSettings(
        host,
        port,
        storage,
        max_body,
        model_names(values.get("served_model_names", "")),
        _bound(values.get("max_queued", ""), "max_queued", int, "a whole number of jobs, e.g. max_queued=100"),
        _bound(values.get("keep_hours", ""), "keep_hours", float, "a number of hours, e.g. keep_hours=24"),
        _queue_url(values.get("queue_url", "")),
        _bound(values.get("lease_s", "60"), "lease_s", float, "a number of seconds, e.g. lease_s=60") or 60.0,
        str(values.get("lora_dir", "")).strip() or None,
        _max_batch(values.get("max_batch", "1")),
        _seconds(values.get("batch_wait_s", "0"), "batch_wait_s"),
    )


def _max_batch(text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(
            f"max_batch={text!r} must be a whole number of jobs ≥ 1, e.g. max_batch=4 (1: one job at a time)",
            setting="max_batch",
        )
    return value


def _seconds(text: str, key: str) -> float:
    """A duration ≥ 0 in seconds."""
    try:
        value = float(str(text).strip())
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{key}={text!r} must be a number of seconds ≥ 0, e.g. {key}=2", setting=key)
    return value


def _queue_url(text: str) -> str | None:
    text = str(text).strip()
    if not text:
        return None
    if not text.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            f"queue_url={text.split('@')[-1]!r} is not a PostgreSQL URL; give postgresql://USER:PASSWORD@HOST:PORT/"
            "DATABASE (leave it out for the SQLite file in storage_dir)",
            setting="queue_url",
        )
    return text


def _bound(text: str, key: str, kind, example: str):
    """An optional positive bound: empty (or none) for no bound."""
    text = str(text).strip()
    if text.lower() in ("", "none", "null"):
        return None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{key}={text!r} must be {example} (leave it out for no bound)", setting=key)
    return value


def model_names(text: str) -> tuple:
    """served_model_names=sora-2,my-wan (or Hydra's list form [sora-2,my-wan]) → the names."""
    names = [n.strip().strip("'\"") for n in text.strip().strip("[]").split(",") if n.strip()]
    for name in names:
        if not name or any(c.isspace() for c in name):
            raise ConfigError(
                f"served_model_names={text!r}: {name!r} is not a model name; give names without spaces, "
                "separated by commas, e.g. served_model_names=sora-2,wan"
            )
    return tuple(names)
