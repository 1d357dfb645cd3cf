"""Run the real generate() on fake GPUs: every rank of a mesh in turn, in this process.

    sim = simulate(["model=tiny", "mesh=cp2"], world=2)      # device=auto → cuda:0, cuda:1
    sim.problems()   # [] when every rank ran and the ranks agree (ledger)

Each simulated rank is a torchrun worker: LOCAL_RANK = rank, the project's own backend
(backends.make_backend) picks its device, joins "NCCL" (the fake group, checked) and runs the
whole generation: load, text, denoise, decode. Rank 0 runs first (its broadcast objects are
replayed to the others) and once more at the end when it receives values from peers that had
not run yet (the VAE's shape headers); so does every rank that gathered host values other
than its peers sent (First-Block Cache's sums, `first_block_metric`, which the harness hands
out up front for peers that have not run: host_side.first_block_values).
"""

from __future__ import annotations

import os
import tempfile
import traceback
from dataclasses import dataclass, field

from harness.no_decode import NoDecode

from . import host_side
from .collectives import checked_collectives, nccl_as_fake
from .cuda_runtime import FakeCudaRuntime
from .fake_mode import fake_gpus
from .ledger import Ledger
from .recorder import Recorder

SMALL = ["steps=2", "num_frames=5", "height=32", "width=32", "seed=3"]
HOPPER, BLACKWELL = (9, 0), (10, 0)
SEGMENT_ROUNDS = 6  # reruns a segmented run may need beyond a plain one's (simulate)


def spec_of(overrides, world: int = 1):
    """The run's settings as `python -m parallel_wan.run` composes and validates them."""
    from parallel_wan.config.compose import compose_spec

    return compose_spec(list(overrides), world, output_dir=tempfile.gettempdir())


@dataclass
class RankRun:
    rank: int
    device: str | None = None  # the backend's device
    init_requests: list = field(default_factory=list)  # (backend, device_id) asked of init_process_group
    calls: dict = field(default_factory=dict)  # fake CUDA runtime calls made, by name
    recorder: Recorder = field(default_factory=Recorder)
    latents: tuple | None = None
    info: dict | None = None  # the generation's record (the sidecar's), e.g. info["cache"]
    preview: tuple | None = None  # (steps done, latents shape) a server's preview showed (rank 0)
    after: object = None  # what simulate's `after` answered on this rank
    error: BaseException | None = None

    def describe_error(self) -> str:
        if self.error is None:
            return ""
        frames = [
            f"{os.path.relpath(f.filename)}:{f.lineno}"
            for f in traceback.extract_tb(self.error.__traceback__)
            if "parallel_wan" in f.filename
        ]
        where = " < ".join(frames[::-1][:3])
        return f"rank {self.rank}: {type(self.error).__name__}: {str(self.error)[:400]} (at {where})"


@dataclass
class Simulation:
    overrides: list
    world: int
    capability: tuple
    ranks: list[RankRun]
    ledger: Ledger
    checkpoint_folder: str

    def problems(self) -> list[str]:
        failed = [r.describe_error() for r in self.ranks if r.error is not None]
        return failed + (self.ledger.mismatches() if not failed else [])


class Checkpoints:
    """Tiny checkpoints written once per task (host side, real tensors: safetensors cannot
    write fake ones) and shared by every simulation of a test session; `image` is a first
    frame for I2V/TI2V runs."""

    def __init__(self, folder: str):
        self.folder, self.made = folder, {}
        self.image = os.path.join(folder, "first_frame.png")
        if not os.path.exists(self.image):
            import numpy as np
            from PIL import Image

            pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(self.image)

    def for_spec(self, spec):
        from parallel_wan.builtin.tiny import build_tiny, write_checkpoint
        from parallel_wan.weights.layout import describe_checkpoint

        def materialize_tiny(spec, folder):
            model = build_tiny(kind=spec.model.architecture, seed=0)
            # S2V has only the official layout (there is no diffusers S2V pipeline)
            layout = "official" if model.audio_encoder is not None else "diffusers"
            write_checkpoint(model, folder, layout=layout)
            return describe_checkpoint(folder)

        if spec.model.task not in self.made:
            self.made[spec.model.task] = materialize_tiny(spec, self.folder_for(spec))
        return self.made[spec.model.task]

    def folder_for(self, spec) -> str:
        return os.path.join(self.folder, spec.model.task)


def _progress(recorder: Recorder):
    """The denoising loop's progress callback: tags everything that runs with its step."""

    def wrap(steps):
        for i, step in enumerate(steps):
            recorder.phase = f"step {i}"
            yield step
        recorder.phase = "after"

    return wrap


class _VotedPreview:
    """A server's preview (serve/previews.ServerPreview) asked for at `step`: every rank learns
    it as the vote would tell it (the vote itself is a host-side gloo all-reduce, which the fake
    NCCL group cannot make: the gloo rank tests run it), and the gather of the latents follows."""

    def __init__(self, step: int, out: RankRun):
        self.step, self.out, self.done = step, out, 0

    def wanted(self) -> bool:
        self.done += 1
        return self.done == self.step

    def show(self, steps_done: int, latents) -> None:
        self.out.preview = (steps_done, tuple(latents.shape))


def run_rank(
    spec,
    ckpt,
    rank: int,
    world: int,
    ledger: Ledger,
    capability=HOPPER,
    compile_backend: str | None = None,
    first_block_metric=None,
    decode: bool = True,
    preview_at: int | None = None,
    stop_after: int | None = None,
    after=None,
) -> RankRun:
    from parallel_wan.backends import make_backend
    from parallel_wan.launch import TORCHRUN, Launch
    from parallel_wan.pipeline import generate

    out = RankRun(rank)
    runtime = FakeCudaRuntime(devices=max(world, 8), capability=capability)
    ledger.start_rank(rank)
    launch = Launch(rank, world, rank, "fake torchrun", kind=TORCHRUN)
    with (
        host_side.fresh_process_state(),
        fake_gpus(runtime, out.recorder) as mode,
        host_side.host_text_encoder(mode),
        host_side.host_audio_encoder(),
        host_side.segment_inputs_once(out.recorder),
        host_side.host_device_mesh(),
        host_side.fake_file_views(),
        host_side.without_vae(not decode and spec.model.task == "t2v"),
        host_side.dtensor_type_check(),
        nccl_as_fake(rank, world, runtime) as requests,
        host_side.first_block_values(first_block_metric, rank, out.recorder, spec.mesh.cp) as foresee,
        checked_collectives(ledger, rank, runtime, nccl=spec.execution.device != "cpu", foresee=foresee),
    ):
        try:
            backend = make_backend(spec, launch, compile_backend=compile_backend or "inductor")
            out.device = str(backend.device)
            if not decode:
                backend.video_decoder = lambda params, cfg: NoDecode()  # the step-cache tests' subject is the loop
            preview = None if preview_at is None else _VotedPreview(preview_at, out)
            gen = generate(
                spec, backend, ckpt, progress=_progress(out.recorder), preview=preview, stop_after=stop_after
            )
            if gen.state is None:
                out.latents, out.info = tuple(gen.latents.shape), gen.info
            if after is not None:  # more of the rank's work on the generation, in its fake process
                out.after = after(gen, spec, backend)
        except Exception as exc:  # noqa: BLE001 - reported by Simulation.problems
            out.error = exc
    out.init_requests, out.calls = list(requests), dict(runtime.calls)
    return out


def simulate(
    overrides,
    world: int = 1,
    checkpoints: Checkpoints | None = None,
    capability=HOPPER,
    compile_backend: str | None = None,
    device: str = "auto",
    first_block_metric=None,
    decode: bool = True,
    preview_at: int | None = None,
    transform=None,
    stop_after: int | None = None,
    after=None,
) -> Simulation:
    """`preview_at`: a server's preview asked for after that step (the vote and the gather);
    `first_block_metric(rank, step, branches)`: the (branches, 2) First-Block Cache sums
    each rank's shard gives at each step, as host values (host_side.first_block_values);
    `decode=False` leaves the VAE decode out (half a tiny run's fake ops, and the reruns its
    shape headers cause), and in a text-to-video run the VAE's load too (host_side.without_vae);
    `transform(spec)`: the spec the ranks run instead (a server's batch: jobs/batch.batched);
    `stop_after`: the loop stops after that step (generate's); `after(gen, spec, backend)`: what
    each rank does next, its answer kept as RankRun.after."""
    spec = spec_of([*SMALL, *overrides, f"device={device}"], world)
    spec = spec if transform is None else transform(spec)
    checkpoints = checkpoints or Checkpoints(tempfile.mkdtemp(prefix="fakegpu_ckpt_"))
    ckpt = checkpoints.for_spec(spec)
    host_side.import_torch_side()
    ledger = Ledger()

    def rank(r):
        return run_rank(
            spec,
            ckpt,
            r,
            world,
            ledger,
            capability,
            compile_backend,
            first_block_metric,
            decode,
            preview_at,
            stop_after,
            after,
        )

    ranks = [rank(r) for r in range(world)]

    def waiting() -> set[int]:
        """Ranks stopped for want of rank 0's broadcast objects, which its run had not reached."""
        return {r for r, run in enumerate(ranks) if run.error is not None and "simulate rank 0 first" in str(run.error)}

    # A rank runs again when it received from peers that had not run yet (rank 0: the VAE's
    # shape headers) and so does every rank whose gathered host values are not what its peers
    # sent (First-Block Cache's sums, when not foreseen): until they are, at most `world` rounds.
    # A segmented run (Animate, S2V) decodes between segments, so rank 0 needs the peers' bands
    # mid-run and the peers need what rank 0 broadcasts after them: each round takes every
    # rank one segment further, `SEGMENT_ROUNDS` more rounds at most.
    again = {r for r, *_ in ledger.stale_gathers()} | ledger.early
    for _ in range(world + SEGMENT_ROUNDS):
        for r in sorted(again):
            ranks[r] = rank(r)
        stopped = {r for r in ledger.early if ranks[r].error is not None}  # a peer's band it had not got
        again = {r for r, *_ in ledger.stale_gathers()} | waiting() | stopped
        if not again:
            break
    return Simulation(list(overrides), world, capability, ranks, ledger, checkpoints.folder_for(spec))
