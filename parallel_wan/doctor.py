"""Check a machine before a big job, without loading any weights:

    python -m parallel_wan.doctor model=wan2.2_t2v_a14b mesh=dp2_cp4 [dtype=… height=… device=…]
    torchrun --nproc-per-node 8 -m parallel_wan.doctor mesh=dp2_cp4   # also joins NCCL across the node

The same Hydra settings as `parallel_wan.run`. It prints:
- the devices torch sees (name, CUDA capability, memory) and the one this process would use;
- the attention kernel sequence-parallel attention will run, found by running it once on a
  small input in the run's dtype (flash-attn 3, cuDNN, PyTorch's flash kernel ...), with a loud
  WARNING when it falls back to a slow one;
- whether the process group starts (NCCL on CUDA, gloo on CPU) and one all_reduce completes;
- the mesh the run would use and the launch command it needs; under a launcher (torchrun, srun),
  a PROBLEM when the processes started are not the world the mesh needs (the run refuses them);
- the memory planner's verdict (`parallel_wan.plan`) for this device's memory.
Exit status: 0 ready, 1 a problem (named on a line starting "PROBLEM"), 2 a bad setting.
"""

from __future__ import annotations

import os
import sys

import torch

from .config import ConfigError, mesh_spec

# Wan 2.2's transformers (A14B: 40 heads × 128, TI2V-5B: 24 × 128) all have head_dim 128: the
# probe's, whatever model= says (the tiny models' 16 would ask other kernels than a real run).
HEAD_DIM = 128
PROBE_TOKENS = 256


def kernel_verdict(kernel: str, capability: tuple[int, int] | None, dtype: str) -> tuple[str, bool]:
    """(what to tell the user, whether it is a slow fallback) for the attention kernel chosen,
    from the registered kernels' records (backends/torch/kernels/): which are slow fallbacks,
    and which would be faster on this GPU generation when installed."""
    from .backends.torch import kernels

    known = {k.name: k for k in kernels.kernels()}  # torch_sdpa (PyTorch chose) is none of them
    slow = known[kernel].slow if kernel in known else None
    if capability is None:
        return f"{kernel} (CPU)", slow is not None
    sm = f"sm_{capability[0]}{capability[1]}"
    if dtype == "float32":
        return f"{kernel} on {sm}: fp32 has no flash kernel; dtype=bfloat16 is several times faster", False
    if slow is not None:
        return (
            f"{kernel} on {sm}: {slow}, a slow fallback — the fast kernels refused "
            "(check the log above, cuDNN ≥ 9, or install flash-attn)"
        ), True
    generation = kernels.generation("cuda", capability)
    faster = [k for k in known.values() if generation in k.suggested_on and k.name != kernel]
    note = "".join(
        f" ({k.package_label} is not installed; it may be faster on {kernels.GENERATIONS[generation]})"
        for k in faster[:1]
    )
    return f"{kernel} on {sm}{note}", False


class Doctor:
    def __init__(self, overrides: list[str], out=sys.stdout):
        from .backends.torch.world import launch_from_env
        from .config.compose import compose_settings

        self.overrides, self.out, self.problems = list(overrides), out, []
        self.raw = compose_settings(overrides)
        degrees = self.raw.get("mesh") or {}
        try:
            world = int(degrees.get("dp", 1)) * int(degrees.get("cp", 1))
        except (TypeError, ValueError):
            world = 0  # mesh_spec names the bad value
        self.mesh = mesh_spec(degrees, world)  # validated against the world it needs, as the run is
        self.dtype = str(self.raw.get("dtype") or "bfloat16")
        self.launch = launch_from_env()
        # Under torchrun every rank runs the same checks (each its own GPU, all the NCCL group),
        # but only rank 0 reports; another rank prints only its problems, tagged with its rank.
        self.reports = self.launch.rank == 0
        self.tag = f"[rank {self.launch.rank}/{self.launch.world_size}] " if self.launch.world_size > 1 else ""

    def say(self, line: str) -> None:
        if self.reports:
            self._write(line)

    def _write(self, line: str) -> None:
        """One line in one write: under torchrun every rank shares the terminal (or pipe), and
        print's two writes (the text, then the newline; unbuffered when PYTHONUNBUFFERED is set)
        let another rank's line land between them — seen in CI as rank 1's PROBLEM line glued to
        the end of rank 0's torch line. A pipe write of under PIPE_BUF bytes is never split."""
        self.out.write(line + "\n")
        self.out.flush()

    def problem(self, line: str, every_rank: bool = True) -> None:
        """Record a problem (this process exits 1). `every_rank=False`: the job's, the same on
        every rank, so only rank 0 prints it."""
        self.problems.append(line)
        if every_rank or self.reports:
            self._write(f"{self.tag if not self.reports else ''}PROBLEM: {line}")

    # ------------------------------------------------------------ the checks
    def devices(self) -> torch.device | None:
        from .backends.torch.world import pick_device

        self.say(
            f"torch {torch.__version__}; CUDA build: {torch.backends.cuda.is_built()}; "
            f"CUDA devices: {torch.cuda.device_count() if torch.cuda.is_available() else 0}"
        )
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                self.say(f"  cuda:{i} {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 1e9:.1f} GB")
        setting = str(self.raw.get("device") or "auto")
        try:
            # the world the mesh needs: an explicit cuda:N is refused for several processes
            device = pick_device(setting, self.launch.local_rank, max(self.mesh.world_size, self.launch.world_size))
        except ConfigError as exc:
            self.problem(str(exc))
            return None
        self.say(f"device={setting} → this process uses {device}")
        return device

    def attention(self, device: torch.device) -> None:
        from .backends.torch.attention import KernelChoice

        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(self.dtype, torch.bfloat16)
        choice = KernelChoice("auto")  # chosen for this device now, as a run's backend chooses
        q = torch.randn(1, PROBE_TOKENS, 2, HEAD_DIM, dtype=dtype, device=device)
        try:
            choice(q, q, q)
        except RuntimeError as exc:
            self.problem(f"no attention kernel runs here: {str(exc).splitlines()[0]}")
            return
        kernel = choice.chosen()[(device.type, dtype, HEAD_DIM)]
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        text, slow = kernel_verdict(kernel, capability, self.dtype)
        self.say(f"attention (sequence parallel, {self.dtype}, head_dim {HEAD_DIM}): {text}")
        if slow:
            self.say("!" * 78)
            self.say(f"WARNING: slow attention fallback: {text}")
            self.say("!" * 78)
        self.chosen_attention(device, dtype, q)

    def chosen_attention(self, device: torch.device, dtype: torch.dtype, q: torch.Tensor) -> None:
        """attention_impl=sdpa|flash|cudnn|sage (a value naming kernels) as set: can it run
        here, and which kernel it runs."""
        from .backends.torch import kernels
        from .backends.torch.attention import KernelChoice
        from .backends.torch.attention_impl import unavailable_reason

        impl = str(self.raw.get("attention_impl") or "auto")
        if impl not in kernels.settings():  # auto (or its old name), or xfuser (sequence_parallel's)
            return
        choice = KernelChoice(impl)
        reason = unavailable_reason(impl, device, HEAD_DIM, dtype)
        if reason is None:
            try:
                choice(q, q, q)
            except Exception as exc:  # noqa: BLE001 — any refusal (torch, Triton compile, package) is the report
                reason = (
                    f"attention_impl={impl} failed here: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                )
        if reason:
            self.problem(reason)
            return
        kernel = choice.chosen()[(device.type, dtype, HEAD_DIM)]
        self.say(f"attention_impl={impl} → {kernel} ({self.dtype}, head_dim {HEAD_DIM})")

    def communication(self, device: torch.device) -> None:
        import torch.distributed as dist

        from .backends.torch.world import init_distributed

        backend = "nccl" if device.type == "cuda" else "gloo"
        try:
            if self.launch.world_size > 1:
                init_distributed(self.launch, device, 120.0)  # the run's own start-up, every rank
            else:  # one process: a group of one on an in-memory store
                kwargs = {"device_id": device} if backend == "nccl" else {}
                dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **kwargs)
            t = torch.ones(1, device=device)
            dist.all_reduce(t)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.say(f"communication: {dist.get_backend()} group of {dist.get_world_size()}, one all_reduce OK")
        except Exception as exc:  # noqa: BLE001 - reported as the problem it is
            self.problem(
                f"{backend} process group or all_reduce failed: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}"
            )
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    def mesh_and_plan(self, device: torch.device | None) -> None:
        m = self.mesh
        launch = (
            "python -m parallel_wan.run"
            if m.world_size == 1
            else f"torchrun --nproc-per-node {m.world_size} -m parallel_wan.run"
        )
        self.say(
            f"mesh={m.name}: dp={m.dp} × cp={m.cp} (ulysses {m.ulysses} × ring {m.ring}) = "
            f"{m.world_size} process{'es' if m.world_size > 1 else ''}; launch with `{launch} mesh={m.name} ...`"
        )
        self.launched_world()
        if device is not None and device.type == "cuda" and m.world_size > torch.cuda.device_count():
            self.say(
                f"note: {m.world_size} processes, {torch.cuda.device_count()} GPUs here: the job needs several nodes"
            )
        if device is not None and device.type == "cuda":
            gb = torch.cuda.get_device_properties(device).total_memory / 1e9
        else:
            gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
        gb = round(gb, 1)
        from .config import ConfigError
        from .memory_plan.cli import plan_report

        try:
            text, fits = plan_report(self.raw, gb)
        except ConfigError as exc:
            self.problem(f"the planner refused the settings: {exc}")
            return
        lines = text.splitlines()
        verdict = next((line for line in lines if line.startswith("peak ") and "GB of" in line), lines[-1])
        self.say(f"plan for this device's {gb:.1f} GB: {verdict}")
        self.say("  " + next(line for line in lines if line.startswith("time ")))  # on this device, measured
        if not fits:
            self.say("  " + next(line for line in lines if line.startswith("try: ")))
            self.problem(
                f"the run does not fit: {verdict.removesuffix(': DOES NOT FIT')} "
                "(python -m parallel_wan.plan … prints every phase)"
            )

    def launched_world(self) -> None:
        """Started by a launcher (torchrun, srun, …), the processes are the job's own: a mesh for
        another number of them is the launch parallel_wan.run refuses, in the run's words. One
        process started by hand only describes the launch the mesh needs; mesh=auto fits any world."""
        from .launch import SINGLE

        if self.launch.kind == SINGLE or self.mesh.name == "auto":
            return
        try:
            mesh_spec(self.raw.get("mesh") or {}, self.launch.world_size)
        except ConfigError as exc:
            self.problem(str(exc), every_rank=False)

    def run(self) -> int:
        device = self.devices()
        if device is not None:
            self.attention(device)
            self.communication(device)
        self.mesh_and_plan(device)
        self.say("ready" if not self.problems else f"{len(self.problems)} problem(s); see PROBLEM lines")
        self.report_finished()
        return 1 if self.problems else 0

    def report_finished(self) -> None:
        """Under torchrun, a rank that ends with problems before rank 0 has printed its report
        makes the agent stop every worker, rank 0 in the middle of its report. So rank 0 marks
        its report done in the agent's store (TORCHELASTIC_USE_AGENT_STORE: the store torchrun
        hosts for its workers, which no device or process group is needed for) and the other
        ranks wait for that mark before they exit (at most 5 minutes: if rank 0 died, the agent
        has already stopped them)."""
        env = os.environ
        if self.launch.world_size < 2 or env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            return
        from datetime import timedelta

        import torch.distributed as dist

        try:
            store = dist.TCPStore(
                env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False, timeout=timedelta(minutes=5)
            )
            key = f"parallel_wan/doctor/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/report_done"
            if self.reports:
                store.set(key, "1")
            else:
                store.wait([key])
        except Exception:  # noqa: BLE001 - the report is printed; this only orders the exits
            pass


def main(argv: list[str], out=sys.stdout) -> int:
    from .cli import front
    from .entry import refusal

    try:
        return Doctor(front("doctor", argv), out).run()
    except ConfigError as exc:
        return refusal(exc, "parallel_wan.doctor")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
