"""The server against the other ways of making many videos, what polling costs the denoising
loop, and whether its ranks' memory stays flat (README "Serving"; BENCHMARKS.md "Serving").

    python -m benchmarks.serve throughput [--videos 20]     # server vs prompts=FILE vs one CLI per video
    python -m benchmarks.serve polling [--clients 50]        # step time, 50 clients polling every 100 ms vs none
    python -m benchmarks.serve memory [--jobs 50]            # every rank's RSS over 50 jobs of mixed shapes (4 ranks)
    python -m benchmarks.serve lora [--jobs 10]              # a LoRA switch: seconds and bytes, against a job
    python -m benchmarks.serve batch [--videos 16]           # 16 queued requests, max_batch=1 vs 4

throughput: the same tiny jobs (64×64, 9 frames, 4 steps) through a one-process server (start to
ready, then first POST to last completed), as one `prompts=FILE` job, and as one
`python -m parallel_wan.run` per video; wall seconds and seconds per job.
polling: a one-process server runs three identical jobs — no clients, `--clients` threads each
polling GET /v1/videos/{id} every `--every` s, no clients again — and the step time of each
comes from the server's own /metrics (parallel_wan_step_seconds). The server runs with
OMP_NUM_THREADS=1; `--layout apart` (default, two or more cores) pins rank 0's process (the
loop) to the first core and its HTTP process and the clients to the rest, as on a GPU host where
rank 0 has cores to spare; `--layout shared` leaves every process free. Also printed: the HTTP
process's CPU per request answered.
memory: a 4-rank torchrun server runs `--jobs` jobs cycling through five shapes; every rank's
VmRSS after each job; the ratio of the last to the 5th (the first ones warm allocators).
lora: a one-process server with lora_dir= (one random LoRA on every block linear of the tiny
model) runs `--jobs` jobs alternating with and without it, so every job but the first switches;
the switch seconds from its own /metrics (parallel_wan_lora_switch_seconds) against the jobs'
denoise seconds, and the bytes a switch reads (both experts' weights, from the safetensors
headers).
batch: `--videos` small requests (the throughput jobs, each its own prompt and seed) all queued
before a one-process server has loaded, run with max_batch=1 and with max_batch=4: wall seconds
from ready to the last completed, videos per minute, and the transformer forwards per
video from the server's /metrics (parallel_wan_denoise_steps: one forward per step of a batch).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from processes.servers import REPO, ServerProcesses, environment, rss_mb

TINY = ["model=tiny", "dtype=float32", "steps=4", "num_frames=9", "height=64", "width=64"]


def throughput(videos: int, folder: Path) -> None:
    prompts = [{"prompt": f"video {i}: a red fox walks through fresh snow", "seed": i} for i in range(videos)]
    t0 = time.perf_counter()
    server = ServerProcesses(folder / "storage", TINY)
    try:
        server.wait_ready()
        ready = time.perf_counter()
        ids = [server.post(**p)["id"] for p in prompts]
        for video_id in ids:
            server.wait_for(video_id, "completed", timeout=3600, every=0.05)
        done = time.perf_counter()
    finally:
        server.stop()
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    job = cli([f"prompts={path}", f"output_dir={folder / 'job'}"], folder)
    single = sum(
        cli([f"prompt='{p['prompt']}'", f"seed={p['seed']}", f"output_dir={folder / f'one{i}'}"], folder)
        for i, p in enumerate(prompts)
    )
    print(f"{videos} tiny videos ({' '.join(TINY)}), wall seconds incl. start-up:")
    print(f"  {'':44s} {'seconds':>8s} {'per video':>10s}")
    rows = [
        ("server: start until ready", ready - t0),
        ("server: first POST to last completed", done - ready),
        ("server: total", done - t0),
        ("one prompts=FILE job", job),
        ("one CLI process per video", single),
    ]
    for name, seconds in rows:
        per = f"{seconds / videos:10.2f}" if "until ready" not in name else ""
        print(f"  {name:44s} {seconds:8.1f} {per}")
    print(
        f"  server overhead per video against prompts=FILE: {(done - t0 - job) / videos:+.2f} s "
        f"(hot, after loading: {(done - ready) / videos:.2f} s per video)"
    )


def cli(words: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", *TINY, *words],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=environment(),
        check=False,
    )
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return time.perf_counter() - t0


def step_seconds(server: ServerProcesses) -> tuple[float, int]:
    text = server.client.get("/metrics").text
    total = float(re.search(r"^parallel_wan_step_seconds_sum (\S+)", text, re.MULTILINE).group(1))
    count = int(float(re.search(r"^parallel_wan_step_seconds_count (\S+)", text, re.MULTILINE).group(1)))
    return total, count


def polling(clients: int, every: float, steps: int, folder: Path, layout: str) -> None:
    cores = sorted(os.sched_getaffinity(0))
    settings = ["model=tiny", "dtype=float32", f"steps={steps}"]  # the tiny model's 128×128, 17 frames
    server = ServerProcesses(folder / "storage", settings)
    try:
        server.wait_ready()
        pid, http = server.ranks()[0], server.http_pid()
        if len(cores) > 1 and layout != "shared":
            # the loop's process on the first core; the HTTP process with the clients on the rest, as
            # on a GPU host, where rank 0 has cores to spare (threads started later inherit the mask)
            for owner, where in ((pid, cores[:1]), (http, cores[1:]), (os.getpid(), cores[1:])):
                for task in os.listdir(f"/proc/{owner}/task"):
                    os.sched_setaffinity(int(task), where)
        results = []
        for arm in ("none", f"{clients} clients", "none again"):
            video_id = server.post(prompt="a long take of the sea", seed=1)["id"]
            server.wait_for(video_id, "in_progress", every=0.01)
            before, cpu_before = step_seconds(server), cpu_seconds(http)
            pollers = Pollers(server.url, video_id, clients if "clients" in arm else 0, every)
            server.wait_for(video_id, "completed", timeout=3600, every=0.2)
            pollers.stop()
            after, cpu_after = step_seconds(server), cpu_seconds(http)
            seconds, count = after[0] - before[0], after[1] - before[1]
            beside = cpu_after - cpu_before
            results.append((arm, seconds / count, count, pollers.requests, pollers.elapsed, beside))
    finally:
        server.stop()
    where = (
        f"the loop's process on core {cores[0]}; the HTTP process and the clients on {cores[1:]}"
        if len(cores) > 1 and layout != "shared"
        else f"every process on cores {cores}, shared"
    )
    print(f"denoise step time, tiny model 128×128×17 fp32, one process ({where}):")
    for arm, mean, count, requests, elapsed, beside in results:
        print(
            f"  {arm:14s} {mean * 1000:8.1f} ms/step over {count} steps; {requests / elapsed:6.0f} requests/s "
            "answered; "
            f"HTTP process CPU {beside / elapsed * 100:5.1f}% of a core"
            + (f" ({(beside / requests) * 1000:.2f} ms per request)" if requests else "")
        )
    quiet = (results[0][1] + results[2][1]) / 2
    print(f"  with clients / without: {results[1][1] / quiet:.3f}×")


def cpu_seconds(pid: int) -> float:
    """The process's CPU seconds (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pollers:
    """`n` threads, each GETting the job every `every` seconds until stopped."""

    def __init__(self, url: str, video_id: str, n: int, every: float):
        import httpx

        self.requests, self.stopped, self.t0 = 0, threading.Event(), time.perf_counter()
        self.elapsed = 0.0
        lock = threading.Lock()

        def poll():
            with httpx.Client(base_url=url, timeout=30) as client:
                while not self.stopped.is_set():
                    t = time.perf_counter()
                    client.get(f"/v1/videos/{video_id}")
                    with lock:
                        self.requests += 1
                    self.stopped.wait(max(0.0, every - (time.perf_counter() - t)))

        self.threads = [threading.Thread(target=poll, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=30)
        self.elapsed = time.perf_counter() - self.t0


SHAPES = [(64, 64, 9), (96, 64, 5), (64, 128, 9), (128, 128, 17), (80, 48, 13)]


def memory(jobs: int, folder: Path) -> None:
    server = ServerProcesses(folder / "storage", ["model=tiny", "dtype=float32", "steps=3"], ranks=4)
    try:
        server.wait_ready()
        ranks, samples = server.ranks(), []
        for i in range(jobs):
            width, height, frames = SHAPES[i % len(SHAPES)]
            video_id = server.post(prompt=f"job {i}", seed=i, size=f"{width}x{height}", num_frames=frames)["id"]
            server.wait_for(video_id, "completed", timeout=3600, every=0.05)
            samples.append([rss_mb(pid) for pid in ranks])
    finally:
        server.stop()
    print(f"VmRSS (MB) of each of the 4 ranks after job k of {jobs} (shapes cycling {SHAPES}):")
    for k in sorted({1, 5, 10, 25, jobs}):
        print(f"  after job {k:3d}: " + "  ".join(f"{mb:7.1f}" for mb in samples[k - 1]))
    ratios = [samples[-1][r] / samples[4][r] for r in range(len(ranks))]
    print(f"  job {jobs} / job 5, per rank: " + "  ".join(f"{x:.3f}" for x in ratios))


def lora(jobs: int, folder: Path) -> None:
    sys.path.insert(0, os.path.join(REPO, "tests"))  # the tests' random LoRA files (harness/lora_files.py)
    from harness.lora_files import lora_pairs, write_lora

    from parallel_wan.builtin.tiny import transformer_config

    loras = folder / "loras"
    loras.mkdir()
    write_lora(loras / "style.safetensors", lora_pairs(transformer_config("t2v"), rank=8, seed=2), "peft", alpha=4.0)
    server = ServerProcesses(folder / "storage", [*TINY, f"lora_dir={loras}"])
    try:
        server.wait_ready()
        for i in range(jobs):
            named = {"loras": [{"name": "style"}]} if i % 2 else {}
            video_id = server.post(prompt=f"job {i}", seed=i, **named)["id"]
            server.wait_for(video_id, "completed", timeout=3600, every=0.05)
        text = server.client.get("/metrics").text
    finally:
        server.stop()

    def metric(name: str) -> float:
        return float(re.search(rf"^{name} (\S+)", text, re.MULTILINE).group(1))

    switches = metric("parallel_wan_lora_switch_seconds_count")
    switch = metric("parallel_wan_lora_switch_seconds_sum") / switches
    denoise = metric('parallel_wan_phase_seconds_sum{phase="denoise"}') / metric(
        'parallel_wan_phase_seconds_count{phase="denoise"}'
    )
    from parallel_wan.builtin.tiny import build_tiny

    tiny = build_tiny("t2v", seed=0)  # the experts a switch loads again (fp32 here: dtype=float32)
    weights = sum(p.numel() * 4 for m in (tiny.transformer, tiny.transformer_2) for p in m.parameters())
    print(f"{jobs} jobs ({' '.join(TINY)}), {int(switches)} LoRA switches:")
    print(f"  switch (experts loaded again with the job's LoRAs): {switch:.3f} s mean")
    print(f"  denoise of a job:                                  {denoise:.3f} s mean")
    print(f"  switch / denoise: {switch / denoise:.2f}")
    print(f"  bytes a switch loads (both experts, float32):      {weights / 1e6:.1f} MB")


def batch(videos: int, folder: Path, sizes=(1, 4)) -> None:
    prompts = [{"prompt": f"video {i}: a red fox walks through fresh snow", "seed": i} for i in range(videos)]
    rows = []
    for size in sizes:
        # batch_wait_s: a job claimed while the last requests are still being posted waits for them
        server = ServerProcesses(folder / f"storage{size}", [*TINY, f"max_batch={size}", "batch_wait_s=1"])
        try:
            while True:  # queued while the model loads: the first claim sees all of them
                try:
                    answer = server.client.post("/v1/videos", json=prompts[0])
                except Exception:
                    answer = None
                if answer is not None and answer.status_code == 200:
                    break
                if not server.alive():
                    server.fail("the server ended before it took a request")
                time.sleep(0.05)
            ids = [answer.json()["id"]] + [server.post(**p)["id"] for p in prompts[1:]]
            server.wait_ready()
            t0 = time.perf_counter()  # the loop starts once the model is loaded
            for video_id in ids:
                server.wait_for(video_id, "completed", timeout=3600, every=0.05)
            wall = time.perf_counter() - t0
            text = server.client.get("/metrics").text
        finally:
            server.stop()
        steps = float(re.search(r"^parallel_wan_denoise_steps_total (\S+)", text, re.MULTILINE).group(1))
        sizes_seen = float(re.search(r"^parallel_wan_batch_size_sum (\S+)", text, re.MULTILINE).group(1))
        batches = float(re.search(r"^parallel_wan_batch_size_count (\S+)", text, re.MULTILINE).group(1))
        phases = {
            phase: float(re.search(rf'^parallel_wan_phase_seconds_sum{{phase="{phase}"}} (\S+)', text, re.M).group(1))
            / videos
            for phase in ("text", "denoise", "vae_decode")
        }
        rows.append((size, wall, videos / wall * 60, steps / videos, sizes_seen / batches, phases))
    print(f"{videos} queued requests ({' '.join(TINY)}), one process:")
    print("  max_batch  wall s  videos/min  forwards/video  mean batch  per video s: text  denoise  decode")
    for size, wall, per_min, forwards, mean, p in rows:
        print(
            f"  {size:9d}  {wall:6.1f}  {per_min:10.1f}  {forwards:14.2f}  {mean:10.2f}  "
            f"{p['text']:17.3f}  {p['denoise']:7.3f}  {p['vae_decode']:6.3f}"
        )
    print(f"  videos/min, max_batch={sizes[-1]} / max_batch={sizes[0]}: {rows[-1][2] / rows[0][2]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("throughput", "polling", "memory", "lora", "batch"))
    parser.add_argument("--videos", type=int, default=20)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--every", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument(
        "--layout",
        choices=("apart", "shared"),
        default="apart",
        help="polling: the loop's thread on a core of its own (apart) or every thread anywhere",
    )
    opts = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", REPO)
    with tempfile.TemporaryDirectory(prefix="parallel_wan_bench_serve_") as folder:
        folder = Path(folder)
        if opts.what == "throughput":
            throughput(opts.videos, folder)
        elif opts.what == "polling":
            polling(opts.clients, opts.every, opts.steps, folder, opts.layout)
        elif opts.what == "lora":
            lora(opts.jobs, folder)
        elif opts.what == "batch":
            batch(opts.videos, folder)
        else:
            memory(opts.jobs, folder)


if __name__ == "__main__":
    main()
