"""Predicted denoising time per mesh: one rank's measured compute (benchmarks/step.py) plus the
communication its bytes (benchmarks/comm_volume.py's analytic model) take at a measured or
given link bandwidth; compared with the published figures (the official Wan 2.2 README's, MaxDiffusion's).

    # bandwidth on the real GPUs (2–8; NCCL), then the prediction from it and step.py's JSONs
    torchrun --nproc-per-node 8 -m benchmarks.comm --measure --json comm_bw.json
    python -m benchmarks.comm --bandwidth-json comm_bw.json --step-json ulysses8.json cp8.json
    # with the link given instead (no multi-GPU machine): an assumed preset or numbers
    python -m benchmarks.comm --link h100-nvlink --step-json ulysses8.json
    python -m benchmarks.comm --a2a-gbps 350 --p2p-gbps 380 --tflops 600

Model of one layer on one rank (per denoising step; both experts have the same shapes):
    compute   the step.py measurement for that mesh, per layer; for a mesh without one, the
              layer's FLOPs (parallel_wan/measure/flops.py) at the TFLOP/s the measured meshes reached
    Ulysses   bytes / all-to-all bandwidth — on the critical path (q/k/v before attention,
              the output after; nothing to overlap with)
    ring      R−1 hops, each posted before the block's attention (ring.py): a hop costs only
              what its transfer takes beyond that block's attention, max(0, hop − attention/R)
per step: layers × layer + the CFG exchange (dp = 2); per generation: steps × step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass

from parallel_wan.measure.flops import forward_flops
from parallel_wan.models.transformer_config import TransformerConfig

from .comm_volume import A14B, ModelShape, analytic, batch_per_rank, load_preset, local_tokens

# Assumed per-GPU algorithm bandwidths, GB/s one way, for when no multi-GPU run is possible:
# NVLink 4 (H100/H200 SXM) is 450 GB/s per direction, NVLink 5 (B200) 900; NCCL all-to-all
# and send/recv reach roughly 75–85 % of it on an NVSwitch node. Labelled "assumed" in reports.
LINKS = {
    "h100-nvlink": {"a2a_gbps": 350.0, "p2p_gbps": 380.0},
    "h200-nvlink": {"a2a_gbps": 350.0, "p2p_gbps": 380.0},
    "b200-nvlink": {"a2a_gbps": 700.0, "p2p_gbps": 760.0},
}
MODELS = {
    "a14b": (TransformerConfig(), A14B, 75_600),
    "5b": (
        TransformerConfig(num_attention_heads=24, ffn_dim=14336, num_layers=30, in_channels=48, out_channels=48),
        ModelShape(heads=24, head_dim=128, dtype="bfloat16", out_features=192, layers=30, steps=50),
        27_280,
    ),
}
PRESETS = ("cp2", "dp2", "cp4", "ulysses4", "ring4", "usp2x2", "dp2_cp2", "cp8", "ulysses8", "ring8", "dp2_cp4")
# As the official Wan 2.2 README and MaxDiffusion publish them: T2V-A14B 720p, 81 frames, 40 steps.
PUBLISHED = [
    ("official Wan 2.2, Ulysses 8 + FSDP, FA3", 8, "8×H100", "155.1 s end to end (text, denoise, VAE)"),
    ("official Wan 2.2", 4, "4×H100", "288.7 s end to end"),
    ("maxdiffusion dp2 × cp4", 8, "TPU v7x-8", "105.3 s denoise (2.63 s/step)"),
]
TARGET_DENOISE_S = 100.0  # issue 7: predicted 8×H100 T2V-A14B 720p denoise, no caching


# ---------------------------------------------------------------- measurement (torchrun or gloo ranks)
def measure_bandwidth(sizes_mb=(16, 64, 256), iters: int = 10, warmup: int = 3) -> dict | None:
    """All-to-all and ring send/recv bandwidth over the whole world (an initialised process
    group): GB/s = bytes one rank sends / seconds. Returns the result on rank 0, None elsewhere."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    rows = []
    for mb in sizes_mb:
        n = max(world, int(mb * 1e6) // 2 // world * world)  # bf16 elements, divisible by world
        send = torch.randn(n, device=device).to(torch.bfloat16)
        recv = torch.empty_like(send)

        def a2a():
            dist.all_to_all_single(recv, send)

        def ring_hop():
            ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

        for name, fn, sent in (
            ("a2a", a2a, send.numel() * 2 * (world - 1) / world),
            ("p2p", ring_hop, send.numel() * 2),
        ):
            for _ in range(warmup):
                fn()
            times = []
            for _ in range(iters):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            # The slowest rank sets the pace of a collective: take every rank's median, keep the max.
            med = torch.tensor([statistics.median(times)], dtype=torch.float64)
            dist.all_reduce(med, op=dist.ReduceOp.MAX)
            rows.append(
                {
                    "kind": name,
                    "mb_per_rank": send.numel() * 2 / 1e6,
                    "seconds": float(med),
                    "gbps": sent / float(med) / 1e9,
                }
            )
    if rank != 0:
        return None
    best = {k: max(r["gbps"] for r in rows if r["kind"] == k) for k in ("a2a", "p2p")}
    return {
        "world": world,
        "backend": dist.get_backend(),
        "rows": rows,
        "a2a_gbps": best["a2a"],
        "p2p_gbps": best["p2p"],
        "source": f"measured, {world} ranks, {dist.get_backend()}",
    }


def measure_on_rank(rank: int, world: int, sizes_mb, iters: int) -> dict | None:
    """For `processes.gloo_ranks.spawn_ranks` (the CPU test): the group is already initialised."""
    return measure_bandwidth(sizes_mb, iters=iters, warmup=1)


def torchrun_measure(sizes_mb, iters: int) -> dict | None:
    import torch
    import torch.distributed as dist

    if "RANK" not in os.environ:
        raise SystemExit("--measure runs under torchrun: torchrun --nproc-per-node N -m benchmarks.comm --measure")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    try:
        return measure_bandwidth(sizes_mb, iters)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------- prediction
@dataclass(frozen=True)
class Link:
    a2a_gbps: float
    p2p_gbps: float
    source: str


@dataclass(frozen=True)
class Prediction:
    mesh: str
    world: int
    compute_layer_s: float
    compute_source: str
    ulysses_layer_s: float
    ring_exposed_layer_s: float
    cfg_step_s: float
    step_s: float
    denoise_s: float


def measured_layers(step_jsons: list[dict], model: str) -> dict[str, dict]:
    """Per mesh: seconds per layer of our fastest variant in step.py, and its TFLOP/s."""
    out = {}
    for r in step_jsons:
        if r["model"] != model:
            continue
        t = statistics.median(r["variants"][r["fastest_ours"]])
        out[r["mesh"]["name"]] = {
            "layer_s": t * r["flops_per_layer"] / r["flops_per_forward"],
            "tflops": r["flops_per_forward"] / t / 1e12,
            "device": r["device"],
            "tokens": r["tokens"],
        }
    return out


def predict(
    spec, cfg: TransformerConfig, shape: ModelShape, tokens: int, link: Link, measured: dict | None, tflops: float
) -> Prediction:
    lc, rows = local_tokens(tokens, spec), batch_per_rank(spec)
    flops = forward_flops(cfg, lc, rows=rows, key_tokens=tokens)
    vol = analytic(spec, tokens, shape)
    if measured is not None:
        compute, source = measured["layer_s"], "measured"
    else:
        compute, source = flops.layer / (tflops * 1e12), f"at {tflops:.0f} TFLOP/s"
    ulysses = vol.ulysses / (link.a2a_gbps * 1e9)
    ring_exposed = 0.0
    if spec.ring > 1:
        hop = vol.ring / (spec.ring - 1) / (link.p2p_gbps * 1e9)
        attention_per_block = compute * flops.layer_self_attention / flops.layer / spec.ring
        ring_exposed = (spec.ring - 1) * max(0.0, hop - attention_per_block)
    cfg_step = vol.cfg_per_step / (link.p2p_gbps * 1e9)
    step = shape.layers * (compute + ulysses + ring_exposed) + cfg_step
    return Prediction(
        spec.name, spec.world_size, compute, source, ulysses, ring_exposed, cfg_step, step, shape.steps * step
    )


def report(preds: list[Prediction], link: Link, model: str, tokens: int, shape: ModelShape, rate_note: str) -> str:
    lines = [
        f"Model {model}, {tokens:,} tokens, CFG on, {shape.layers} layers × {shape.steps} steps; link: "
        f"all-to-all {link.a2a_gbps:.0f} GB/s, P2P {link.p2p_gbps:.0f} GB/s per GPU ({link.source}); {rate_note}.",
        "",
        "| mesh | GPUs | compute ms/layer (source) | Ulysses ms/layer | ring exposed ms/layer | CFG ms/step "
        "| comm share | step s | denoise s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in preds:
        comm = p.ulysses_layer_s + p.ring_exposed_layer_s
        share = comm / (comm + p.compute_layer_s)
        lines.append(
            f"| {p.mesh} | {p.world} | {1e3 * p.compute_layer_s:.2f} ({p.compute_source}) "
            f"| {1e3 * p.ulysses_layer_s:.2f} | {1e3 * p.ring_exposed_layer_s:.2f} | {1e3 * p.cfg_step_s:.2f} "
            f"| {100 * share:.0f} % | {p.step_s:.3f} | {p.denoise_s:.1f} |"
        )
    if model == "a14b":
        lines += ["", "Published (official Wan 2.2, MaxDiffusion; T2V-A14B 720p):"]
        for name, gpus, hw, figure in PUBLISHED:
            ours = [p for p in preds if p.world == gpus]
            best = min(ours, key=lambda p: p.denoise_s) if ours else None
            mine = f"best predicted {gpus}-device denoise here: {best.denoise_s:.1f} s ({best.mesh})" if best else ""
            lines.append(f"- {name}, {hw}: {figure}. {mine}")
        eight = [p for p in preds if p.world == 8]
        if eight:
            best = min(eight, key=lambda p: p.denoise_s)
            verdict = "meets" if best.denoise_s <= TARGET_DENOISE_S else "misses"
            lines.append(
                f"- Issue-7 target, 8 GPUs ≤ {TARGET_DENOISE_S:.0f} s denoise: {verdict} it "
                f"({best.denoise_s:.1f} s, {best.mesh})."
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--measure", action="store_true", help="measure bandwidth (under torchrun) and stop")
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[16, 64, 256])
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--json", help="--measure: write the bandwidth here")
    p.add_argument("--bandwidth-json", help="bandwidth measured by --measure")
    p.add_argument("--link", choices=tuple(LINKS), help="assumed link figures instead of a measurement")
    p.add_argument("--a2a-gbps", type=float)
    p.add_argument("--p2p-gbps", type=float)
    p.add_argument("--step-json", nargs="*", default=[], help="benchmarks/step.py --json outputs")
    p.add_argument("--tflops", type=float, help="compute rate for meshes without a step.py measurement")
    p.add_argument("--model", choices=tuple(MODELS), default="a14b")
    p.add_argument("--tokens", type=int, help="sequence length (default: the model's published resolution)")
    p.add_argument("--presets", nargs="+", default=list(PRESETS))
    args = p.parse_args(argv)

    if args.measure:
        result = torchrun_measure(args.sizes_mb, args.iters)
        if result is not None:
            print(json.dumps(result, indent=1))
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(result, f, indent=1)
        return

    if args.bandwidth_json:
        with open(args.bandwidth_json) as f:
            bw = json.load(f)
        link = Link(bw["a2a_gbps"], bw["p2p_gbps"], bw["source"])
    elif args.a2a_gbps and args.p2p_gbps:
        link = Link(args.a2a_gbps, args.p2p_gbps, "given")
    elif args.link:
        link = Link(**LINKS[args.link], source=f"assumed {args.link}, not measured")
    else:
        raise SystemExit("give the link: --bandwidth-json (from --measure), --a2a-gbps and --p2p-gbps, or --link")

    cfg, shape, default_tokens = MODELS[args.model]
    tokens = args.tokens or default_tokens
    steps = []
    for path in args.step_json:
        with open(path) as f:
            steps.append(json.load(f))
    measured = measured_layers(steps, args.model)
    for name, m in measured.items():
        if m["tokens"] != tokens:
            raise SystemExit(
                f"--step-json for mesh {name} measured {m['tokens']:,} tokens, but the prediction is for "
                f"{tokens:,}; pass --tokens {m['tokens']} or a step.py run at this resolution"
            )
    tflops = args.tflops or (max(m["tflops"] for m in measured.values()) if measured else None)
    if tflops is None:
        raise SystemExit("no compute figure: pass --step-json from benchmarks/step.py, or --tflops")
    rate_note = f"meshes without a step.py run computed at {tflops:.0f} TFLOP/s " + (
        "(given)" if args.tflops else "(the best measured mesh's rate)"
    )
    specs = [load_preset(n) for n in args.presets]
    preds = [predict(s, cfg, shape, tokens, link, measured.get(s.name), tflops) for s in specs]
    print(report(preds, link, args.model, tokens, shape, rate_note))


if __name__ == "__main__":
    main()
