"""GET /metrics: Prometheus text. Each server has its own registry (no process-wide state), read
at scrape time for what the database knows (the queue, by status) and fed by the worker for what
only it sees (outcomes, step and phase seconds)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

# A denoising step of the tiny model on a CPU takes milliseconds, of A14B at 720p on one GPU tens
# of seconds; a phase (load, text, decode) up to minutes.
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250)
PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600)


class ServerMetrics:
    def __init__(self, store, ready):
        self.registry = CollectorRegistry()
        self.jobs = Counter("parallel_wan_jobs", "Jobs this server finished, by outcome", ["outcome"],
                            registry=self.registry)
        self.step_seconds = Histogram("parallel_wan_step_seconds", "Seconds per denoising step (rank 0's loop)",
                                      buckets=STEP_BUCKETS, registry=self.registry)
        self.phase_seconds = Histogram("parallel_wan_phase_seconds", "Seconds per phase of a job (load, text, "
                                       "denoise, vae_decode, …)", ["phase"], buckets=PHASE_BUCKETS, registry=self.registry)
        self.requests = Counter("parallel_wan_requests", "POST /v1/videos by answer", ["answer"],
                                registry=self.registry)
        ready_gauge = Gauge("parallel_wan_ready", "1 once the model is loaded and every rank is there",
                            registry=self.registry)
        ready_gauge.set_function(lambda: 1.0 if ready() else 0.0)
        self.registry.register(_QueueCollector(store))

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _QueueCollector:
    def __init__(self, store):
        self.store = store

    def collect(self):
        counts = self.store.counts()
        depth = GaugeMetricFamily("parallel_wan_queue_depth", "Jobs waiting in the queue (every server of this "
                                  "storage_dir)")
        depth.add_metric([], counts["queued"])
        yield depth
        jobs = GaugeMetricFamily("parallel_wan_videos", "Jobs in the database by status", labels=["status"])
        for status, n in counts.items():
            jobs.add_metric([status], n)
        yield jobs
