"""GET /metrics: Prometheus text. Two processes feed it — the loop (rank 0: jobs by outcome, step
and phase seconds) and the HTTP process (requests) — through prometheus-client's multiprocess
mode: each writes its values to files in $PROMETHEUS_MULTIPROC_DIR (a folder of this server's
own, set before either imports prometheus_client), the HTTP process sums them at scrape time.
What the database knows (the queue, jobs by status, whether the server is ready) is read from
it at scrape time. Without the variable (one process, the tests) the same metrics live in
memory."""

from __future__ import annotations

import os

# A denoising step of the tiny model on a CPU takes milliseconds, of A14B at 720p on one GPU tens
# of seconds; a phase (load, text, decode) up to minutes.
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250)
PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32)
FOLDER_ENV = "PROMETHEUS_MULTIPROC_DIR"


class LoopMetrics:
    """What only the loop sees (rank 0)."""

    def __init__(self, registry=None):
        from prometheus_client import Counter, Histogram

        self.jobs = Counter(
            "parallel_wan_jobs", "Jobs this server finished, by outcome", ["outcome"], registry=registry
        )
        self.step_seconds = Histogram(
            "parallel_wan_step_seconds",
            "Seconds per denoising step (rank 0's loop)",
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.phase_seconds = Histogram(
            "parallel_wan_phase_seconds",
            "Seconds per phase of a job (text, denoise, vae_decode, …)",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=registry,
        )
        self.lora_switch_seconds = Histogram(
            "parallel_wan_lora_switch_seconds",
            "Seconds to put a job's LoRAs into the experts (the experts loaded again with them)",
            buckets=PHASE_BUCKETS,
            registry=registry,
        )
        self.batch_size = Histogram(
            "parallel_wan_batch_size",
            "Jobs run through the denoiser together (max_batch=; 1: alone)",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.steps = Counter(
            "parallel_wan_denoise_steps",
            "Denoising steps run: one transformer forward each for the whole batch and both CFG halves "
            "(a step cache's skipped steps counted too)",
            registry=registry,
        )
        self.queue_wait_seconds = Histogram(
            "parallel_wan_queue_wait_seconds",
            "Seconds a job waited in the queue before this server started it",
            buckets=PHASE_BUCKETS,
            registry=registry,
        )


class ServerMetrics:
    """The HTTP process's: its own counter, the loop's files, the database's numbers."""

    def __init__(self, store, health):
        from prometheus_client import CollectorRegistry, Counter

        self.registry = CollectorRegistry()
        if os.environ.get(FOLDER_ENV):
            from prometheus_client import multiprocess

            multiprocess.MultiProcessCollector(self.registry)
            own = None  # values go to the folder's files; the collector above reads them
        else:
            own = self.registry
            self.loop = LoopMetrics(own)
        self.requests = Counter("parallel_wan_requests", "POST /v1/videos by answer", ["answer"], registry=own)
        self.registry.register(_StoreCollector(store, health))

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _StoreCollector:
    def __init__(self, store, health):
        self.store, self.health = store, health

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        counts = self.store.counts()
        depth = GaugeMetricFamily(
            "parallel_wan_queue_depth", "Jobs waiting in the queue (every server of this storage_dir)"
        )
        depth.add_metric([], counts["queued"])
        yield depth
        jobs = GaugeMetricFamily("parallel_wan_videos", "Jobs in the database by status", labels=["status"])
        for status, n in counts.items():
            jobs.add_metric([status], n)
        yield jobs
        ready = GaugeMetricFamily("parallel_wan_ready", "1 once the model is loaded and every rank is there")
        ready.add_metric([], 1.0 if self.health()[0] else 0.0)
        yield ready
