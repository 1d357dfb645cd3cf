"""Bytes each rank sends per transformer layer, for every mesh preset: measured and analytic.

The real `make_self_attention` runs on gloo processes with the A14B attention shape (40 heads
of 128, bfloat16), its mesh built on `CountingCollectives` over torch.distributed (the real
messages still travel, each counted as it is sent); the CFG exchange and the final gather run
through the real `MeshExchanges`. Every count is proportional to the tokens a rank holds, so the run uses
75,600 / SCALE tokens and multiplies by SCALE to give the 720p figures (exact: nothing in the
count depends on the token count other than through that factor, and both sizes divide every cp).

    python -m benchmarks.comm_volume                          # all presets, the tables of BENCHMARKS.md
    python -m benchmarks.comm_volume --presets cp8 ring8 --scale 35   # the same at 5x the tokens

Analytic volumes per rank, with x = B·Lc·H·D·bytes (one of q, k, v or the output on a rank):
Ulysses sends (U−1)/U of q, k, v and of the output: 4·x·(U−1)/U. The ring sends its K and V
block R−1 times: 2·x·(R−1) (after a Ulysses all-to-all a ring block is U·Lc tokens of H/U
heads, the same x). CFG parallel sends this rank's noise prediction, Lc × out_features, once
per step. The final gather delivers every rank's Lc fp32 latent tokens to the decoding rank.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass

import yaml

from parallel_wan.parallel.cfg_rows import halves_in_forward
from parallel_wan.parallel.mesh import MeshSpec
from parallel_wan.parallel.shards import SequenceShards
from parallel_wan.parallel.work import rank_work

MESH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "mesh")
PRESETS = (
    "single",
    "cp2",
    "dp2",
    "cp4",
    "ulysses4",
    "ring4",
    "usp2x2",
    "dp2_cp2",
    "cp8",
    "ulysses8",
    "ring8",
    "dp2_cp4",
)
TOKENS_720P = 75_600  # T2V-A14B 1280×720, 81 frames: 21 latent frames × (90/2) × (160/2) patches
SCALE = 175  # 75,600 / 175 = 432 tokens, divisible by cp = 1, 2, 4, 8
LATENT_BYTES = 4  # the sampler's state (latent tokens) is float32 whatever the model dtype
# The collectives attention, the CFG exchange and the gather make; any other call is reported.
EXPECTED = ("all_to_all", "exchange", "all_gather")


@dataclass(frozen=True)
class ModelShape:
    heads: int
    head_dim: int
    dtype: str  # the model's compute dtype: q, k, v and the forward's output
    out_features: int  # per-token noise prediction: out_channels × patch volume
    layers: int
    steps: int

    @property
    def element_bytes(self) -> int:
        return {"bfloat16": 2, "float16": 2, "float32": 4}[self.dtype]


# T2V-A14B: dim 5120 = 40 × 128, 16 latent channels × patch (1, 2, 2), 40 layers, 40 steps.
A14B = ModelShape(heads=40, head_dim=128, dtype="bfloat16", out_features=64, layers=40, steps=40)


@dataclass(frozen=True)
class Volume:
    """Bytes one rank sends: per layer per step (ulysses, ring), per step (cfg), per generation (gather)."""

    ulysses: int = 0
    ring: int = 0
    cfg_per_step: int = 0
    gather_once: int = 0

    @property
    def attention(self) -> int:
        return self.ulysses + self.ring

    def scaled(self, factor: int) -> Volume:
        return Volume(*(v * factor for v in asdict(self).values()))


def load_preset(name: str) -> MeshSpec:
    path = os.path.join(MESH_DIR, f"{name}.yaml")
    if not os.path.exists(path):
        known = sorted(f[:-5] for f in os.listdir(MESH_DIR) if f.endswith(".yaml"))
        raise SystemExit(f"--presets {name}: no file {path}; choose from {', '.join(known)}")
    with open(path) as f:
        return MeshSpec(**yaml.safe_load(f))


def batch_per_rank(spec: MeshSpec) -> int:
    """Sequences in a rank's forward for one prompt with guidance on: the cond and uncond halves
    batched together, unless CFG parallel (dp = 2) puts one half on each dp rank."""
    work = rank_work(spec, 1, 1, rank=0)
    return len(work.rows) * halves_in_forward(True, work.cfg_branch)


def local_tokens(tokens: int, spec: MeshSpec) -> int:
    return SequenceShards(tokens, spec.cp).local


def analytic(spec: MeshSpec, tokens: int, shape: ModelShape) -> Volume:
    """The minimum each scheme must send per rank (see the module docstring)."""
    lc = local_tokens(tokens, spec)
    x = batch_per_rank(spec) * lc * shape.heads * shape.head_dim * shape.element_bytes
    u, r = spec.ulysses, spec.ring
    return Volume(
        ulysses=4 * x * (u - 1) // u,  # exact: heads divide by u, so x does
        ring=2 * x * (r - 1),
        cfg_per_step=lc * shape.out_features * shape.element_bytes if spec.dp == 2 else 0,
        # Only the decoding rank needs the latents: each other cp rank sends its shard once.
        gather_once=lc * shape.out_features * LATENT_BYTES if spec.cp > 1 else 0,
    )


# ---------------------------------------------------------------- measurement (one gloo rank)
def measure_on_rank(rank: int, world: int, presets: list[dict], tokens: int, shape: dict) -> list[dict]:
    """Run each mesh's real self-attention, CFG exchange and final gather on counting
    collectives; returns this rank's sent bytes per preset."""
    import torch

    from parallel_wan.backends.torch import ops
    from parallel_wan.backends.torch.collectives import CountingCollectives, ProcessGroupCollectives
    from parallel_wan.backends.torch.exchanges import MeshExchanges
    from parallel_wan.backends.torch.mesh import TorchMesh
    from parallel_wan.backends.torch.sequence_parallel import make_self_attention

    counting = CountingCollectives(ProcessGroupCollectives())

    def sent(run) -> dict:
        counting.reset()
        run()
        return dict(counting.by_call)

    shape = ModelShape(**shape)
    dtype = ops.dtype(shape.dtype)
    torch.manual_seed(rank)
    out = []
    for fields in presets:
        spec = MeshSpec(**fields)
        mesh = TorchMesh.build(spec, counting)  # every rank builds every preset's groups, in the same order
        lc = local_tokens(tokens, spec)
        q, k, v = (torch.randn(batch_per_rank(spec), lc, shape.heads, shape.head_dim, dtype=dtype) for _ in range(3))
        attention = make_self_attention(mesh, tokens, lc)
        collectives = MeshExchanges(mesh)
        attn_sent = sent(lambda: attention(q, k, v))
        # The torch noise predictor casts the forward's output to float32 before exchange_dp
        # (backends/torch/predictor.py): mirrored here.
        prediction = torch.randn(1, lc, shape.out_features, dtype=dtype).to(torch.float32)
        cfg_sent = sent(lambda: collectives.exchange_dp(prediction) if spec.dp == 2 else None)
        latent_tokens = torch.randn(1, lc, shape.out_features, dtype=torch.float32)
        gather_sent = sent(lambda: collectives.gather_tokens(latent_tokens))
        out.append(
            {
                "volume": asdict(
                    Volume(
                        ulysses=attn_sent.get("all_to_all", 0),
                        ring=attn_sent.get("exchange", 0),
                        cfg_per_step=sum(cfg_sent.values()),
                        gather_once=sum(gather_sent.values()),
                    )
                ),
                "attention_other": sum(attn_sent.values())
                - attn_sent.get("all_to_all", 0)
                - attn_sent.get("exchange", 0),
                "unexpected": sorted(
                    {name for calls in (attn_sent, cfg_sent, gather_sent) for name in calls if name not in EXPECTED}
                ),
            }
        )
    return out


def measure(specs: list[MeshSpec], tokens: int, shape: ModelShape) -> list[dict]:
    """Measure every spec (one launch per world size). Returns, per spec: the most any rank
    sent ('volume'), and whether every rank sent the same ('uniform')."""
    from processes.gloo_ranks import spawn_ranks

    by_world: dict[int, list[int]] = {}
    for i, spec in enumerate(specs):
        by_world.setdefault(spec.world_size, []).append(i)
    results: list[dict] = [{} for _ in specs]
    for world, idx in by_world.items():
        per_rank = spawn_ranks(measure_on_rank, world, [asdict(specs[i]) for i in idx], tokens, asdict(shape))
        for j, i in enumerate(idx):
            ranks = [r[j] for r in per_rank]
            volumes = [Volume(**r["volume"]) for r in ranks]
            results[i] = {
                "volume": Volume(*(max(getattr(v, f) for v in volumes) for f in asdict(volumes[0]))),
                "uniform": all(v == volumes[0] for v in volumes),
                "attention_other": max(r["attention_other"] for r in ranks),
                "unexpected": sorted({u for r in ranks for u in r["unexpected"]}),
            }
    return results


# ---------------------------------------------------------------- report
def megabytes(n: float) -> str:
    return f"{n / 1e6:,.2f}"


def ratio(measured: int, minimum: int) -> str:
    if minimum == 0:
        return "—" if measured == 0 else "∞"
    return f"{measured / minimum:.3f}"


def report(specs, results, tokens: int, scale: int, shape: ModelShape) -> str:
    full = tokens * scale
    lines = [
        f"Measured at {tokens:,} tokens (× {scale} = {full:,}), heads {shape.heads}, head_dim {shape.head_dim}, "
        f"{shape.dtype} ({shape.element_bytes} B), CFG on (batch 2 per rank unless dp = 2); MB = 10^6 bytes.",
        "",
        "Self-attention, per rank per layer per denoising step:",
        "",
        "| preset | world | dp × (U × R) | batch/rank | tokens/rank | measured MB (× scale) | analytic MB | ratio "
        "| of which Ulysses / ring MB | bytes/rank/layer at measured size |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    cfg_rows = []
    for spec, res in zip(specs, results):
        got, want = res["volume"].scaled(scale), analytic(spec, full, shape)
        lines.append(
            f"| {spec.name} | {spec.world_size} | {spec.dp} × ({spec.ulysses} × {spec.ring}) | {batch_per_rank(spec)} "
            f"| {local_tokens(full, spec):,} | {megabytes(got.attention)} | {megabytes(want.attention)} "
            f"| {ratio(got.attention, want.attention)} | {megabytes(got.ulysses)} / {megabytes(got.ring)} "
            f"| {res['volume'].attention:,} |"
        )
        cfg_rows.append(
            f"| {spec.name} | {megabytes(got.cfg_per_step)} | {megabytes(want.cfg_per_step)} "
            f"| {ratio(got.cfg_per_step, want.cfg_per_step)} | {megabytes(got.cfg_per_step / shape.layers)} "
            f"| {megabytes(got.gather_once)} | {megabytes(want.gather_once)} "
            f"| {megabytes(shape.layers * got.attention + got.cfg_per_step)} |"
        )
    lines += [
        "",
        f"CFG exchange and final gather, per rank ({shape.layers} layers, {shape.steps} steps):",
        "",
        "| preset | CFG measured MB/step | CFG analytic MB/step | ratio | CFG per layer MB (÷ layers) "
        "| gather measured MB (once) | gather minimum MB | per step total MB (layers × attention + CFG) |",
        "|---|---|---|---|---|---|---|---|",
        *cfg_rows,
    ]
    notes = []
    for spec, res in zip(specs, results):
        if not res["uniform"]:
            notes.append(f"{spec.name}: ranks sent different amounts; the table shows the most any rank sent")
        if res["attention_other"] or res["unexpected"]:
            notes.append(f"{spec.name}: collectives outside the count: {res['unexpected']}")
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=list(PRESETS), help="mesh presets (conf/mesh/NAME.yaml)")
    p.add_argument("--scale", type=int, default=SCALE, help=f"measure at {TOKENS_720P:,} / SCALE tokens")
    args = p.parse_args(argv)
    if TOKENS_720P % args.scale:
        raise SystemExit(f"--scale {args.scale} does not divide {TOKENS_720P:,} tokens; pick a divisor such as 175")
    tokens = TOKENS_720P // args.scale
    specs = [load_preset(n) for n in args.presets]
    print(report(specs, measure(specs, tokens, A14B), tokens, args.scale, A14B))


if __name__ == "__main__":
    main()
