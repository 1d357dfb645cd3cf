"""Cross-check of comm_volume's per-layer figures against a whole generation.

comm_volume measures one self-attention call, one CFG exchange and one gather. Here the tiny
built-in model runs a complete generation on gloo ranks with counting collectives, and each
rank's total per collective must equal layers × steps × (per-layer figure) + steps × (CFG) +
the gather, computed from the same formulas: this confirms the pipeline makes exactly one
attention exchange per layer per step with the batch assumed (2 with CFG on, 1 under CFG
parallel), one CFG exchange per step, and one gather, and nothing else but the text broadcast.

    python -m benchmarks.pipeline_traffic                 # cp2, dp2, usp2x2, ring4, ulysses4, dp2_cp2
"""

from __future__ import annotations

import argparse

from .comm_volume import LATENT_BYTES, ModelShape, analytic, load_preset, local_tokens

# Tiny T2V: 8 heads of 16, 2 layers, 16 latent channels × patch (1, 2, 2); bfloat16 like a real run.
# 48×48 pixels × 9 frames → 3 × 3 × 3 = 27 tokens: padded for cp 2, 4 and 8.
TINY = ModelShape(heads=8, head_dim=16, dtype="bfloat16", out_features=64, layers=2, steps=2)
TOKENS = 27
OVERRIDES = ["model=tiny", "dtype=bfloat16", "steps=2", "num_frames=9", "height=48", "width=48", "seed=1", "device=cpu"]
PRESETS = ("cp2", "dp2", "usp2x2", "ring4", "ulysses4", "dp2_cp2")


def traffic_on_rank(rank: int, world: int, overrides: list[str]) -> dict:
    from parallel_wan.backends.torch.collectives import CountingCollectives, ProcessGroupCollectives

    from .tiny_generation import generate_on_rank

    sent = CountingCollectives(ProcessGroupCollectives())
    # The VAE decode's own traffic (halo rows, bands to rank 0) is not the subject: skipped.
    spec, gen = generate_on_rank(rank, world, overrides, comm=sent, decode=False)
    assert gen.info["mesh"]["tokens"] == TOKENS, gen.info["mesh"]
    return {"by_call": dict(sent.by_call), "calls": dict(sent.calls)}


def implemented(spec, shape: ModelShape) -> dict:
    """What the code is expected to send per rank over a whole generation, by collective: the
    analytic attention volume, the CFG prediction as the float32 the torch noise predictor exchanges,
    and the final gather as an all_gather over cp."""
    per = analytic(spec, TOKENS, shape)
    lc = local_tokens(TOKENS, spec)
    cfg_fp32 = per.cfg_per_step * LATENT_BYTES // shape.element_bytes
    gather_all = (spec.cp - 1) * lc * shape.out_features * LATENT_BYTES
    return {
        "all_to_all": shape.layers * shape.steps * per.ulysses,
        "exchange": shape.layers * shape.steps * per.ring,
        "all_gather": shape.steps * cfg_fp32 + gather_all,
    }


def main(argv=None) -> None:
    from processes.gloo_ranks import spawn_ranks

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=list(PRESETS))
    args = p.parse_args(argv)
    print(
        f"Tiny T2V, {TOKENS} tokens, {TINY.layers} layers, {TINY.steps} steps, {TINY.dtype}; bytes per rank "
        "(the most any rank sent) over the whole generation, measured / expected:\n"
    )
    print("| preset | all_to_all | exchange (P2P) | all_gather | broadcast (rank 0, text) | other calls | equal |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    for name in args.presets:
        spec = load_preset(name)
        ranks = spawn_ranks(traffic_on_rank, spec.world_size, OVERRIDES + [f"mesh={name}"])
        want = implemented(spec, TINY)
        got = {k: max(r["by_call"].get(k, 0) for r in ranks) for k in want}
        other = sorted({k for r in ranks for k in r["calls"] if k not in (*want, "broadcast")})
        equal = got == want
        ok &= equal
        cells = " | ".join(f"{got[k]:,} / {want[k]:,}" for k in want)
        print(
            f"| {name} | {cells} | {ranks[0]['by_call'].get('broadcast', 0):,} | {', '.join(other) or '—'} "
            f"| {'yes' if equal else 'NO'} |"
        )
    if not ok:
        raise SystemExit("measured traffic differs from the per-layer formulas: see the rows marked NO")


if __name__ == "__main__":
    main()
