"""Issue 7's benchmark machinery on CPU at tiny sizes: the FLOP counter against a hand count and
against PyTorch's own operator count, the step benchmark end to end (its variants — ours eager,
fused q/k/v, compiled, diffusers — compute the same function), the fused q/k/v path on both
backends, and the communication prediction. Nothing here is timed."""

import numpy as np
import pytest
import torch

from benchmarks import comm, step
from benchmarks.comm_volume import A14B, analytic, load_preset
from parallel_wan.backends.torch import kernels, ops
from parallel_wan.backends.torch.qkv_fusion import fuse_qkv
from parallel_wan.measure.flops import forward_flops
from parallel_wan.models import transformer as dit
from parallel_wan.models.rope import rope_tables
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.weights.tree import map_leaves, unflatten

pytestmark = pytest.mark.system

# dim 8 (2 heads × 4), ffn 16, text_dim 6, freq_dim 4, 3 → 5 channels, patch 1×2×2 (volume 4).
HAND = TransformerConfig(
    num_attention_heads=2,
    attention_head_dim=4,
    ffn_dim=16,
    num_layers=2,
    text_dim=6,
    freq_dim=4,
    in_channels=3,
    out_channels=5,
)


def test_flop_count_equals_the_hand_count():
    # One rank: 5 query tokens, 7 keys in all, 3 text tokens, 2 rows (CFG), 2 layers.
    f = forward_flops(HAND, tokens=5, rows=2, key_tokens=7, context_tokens=3)
    per_row_layer = {
        "self_qkv": 2 * 5 * 8 * 24,  # 1920
        "self_scores": 2 * 5 * 8 * 7,  # 560: QKᵀ over all heads (H·D = 8) and 7 keys
        "self_values": 2 * 5 * 7 * 8,  # 560
        "self_out": 2 * 5 * 8 * 8,  # 640
        "cross_q": 2 * 5 * 8 * 8,  # 640
        "cross_kv": 2 * 3 * 8 * 16,  # 768
        "cross_scores": 2 * 5 * 8 * 3,  # 240
        "cross_values": 2 * 5 * 3 * 8,  # 240
        "cross_out": 2 * 5 * 8 * 8,  # 640
        "ffn": 2 * 5 * 8 * 16 * 2,  # 2560
    }
    assert f.per_layer == {k: 2 * v for k, v in per_row_layer.items()}
    assert f.layer == 2 * 8768
    outside_row = {
        "patch_embed": 2 * 5 * 12 * 8,  # 960: 4 patch positions × 3 channels in
        "time_embed": 2 * (4 * 8 + 8 * 8 + 8 * 48),  # 960: freq → dim → dim, then dim → 6·dim
        "text_embed": 2 * 3 * (6 * 8 + 8 * 8),  # 672
        "head": 2 * 5 * 8 * 20,  # 1600: 4 patch positions × 5 channels out
    }
    assert f.outside == {k: 2 * v for k, v in outside_row.items()}
    assert f.total == 2 * 17536 + 2 * 4192 == 43456


def test_flop_count_equals_pytorchs_operator_count():
    """Every matmul the real forward runs, counted by torch's FlopCounterMode (math attention,
    so the attention products are bmm calls it sees), equals the analytic count."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    cfg = TransformerConfig(
        num_attention_heads=2,
        attention_head_dim=12,
        ffn_dim=40,
        num_layers=2,
        text_dim=6,
        freq_dim=4,
        in_channels=3,
        out_channels=5,
        text_len=3,
    )
    params = unflatten(step.build_diffusers(cfg, 2, torch.float32, torch.device("cpu"), 0).state_dict())
    x, t, ctx = torch.randn(2, 6, 12), torch.tensor([5.0, 5.0]), torch.randn(2, 3, 6)
    cos, sin = rope_tables(12, (1, 2, 3))
    attention = lambda q, k, v: kernels.kernel("math").run(q, k, v, q.shape[-1] ** -0.5)[0]  # noqa: E731
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        dit.forward(params, x, t, ctx, (torch.as_tensor(cos), torch.as_tensor(sin)), cfg, ops, attention)
    assert counter.get_total_flops() == forward_flops(cfg, 6, rows=2).total


def test_flop_count_matches_reference_md_for_a14b_720p():
    # REFERENCE.md: ≈1.6e14 per layer per sample (≈72 % self-attention), ≈5.2e17 per generation.
    f = forward_flops(TransformerConfig(), 75_600)
    assert abs(f.layer / 1.6e14 - 1) < 0.03
    assert 0.70 < f.layer_self_attention / f.layer < 0.74
    assert abs(f.total * 2 * 40 / 5.2e17 - 1) < 0.01  # CFG rows × 40 steps
    # One rank of 8 (Ulysses or ring): exactly an eighth of the work, whatever the split, except
    # the text keys/values of cross-attention, which every rank computes whole (0.2 % here).
    rank = forward_flops(TransformerConfig(), 9_450, rows=2, key_tokens=75_600)
    own = lambda x: x.layer - x.per_layer["cross_kv"]  # noqa: E731
    assert own(rank) * 8 == 2 * own(f)
    assert rank.per_layer["cross_kv"] == 2 * f.per_layer["cross_kv"]


def test_step_benchmark_runs_and_its_variants_agree(tmp_path):
    """The whole step benchmark on CPU, for the hybrid mesh (Ulysses 4 × ring 2, so both
    loopback exchanges run) on a token count that pads (75 → 8 × 10)."""
    out = tmp_path / "step.json"
    r = step.main(
        [
            "--model",
            "tiny",
            "--grid",
            "3",
            "5",
            "5",
            "--mesh",
            "cp8",
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--compile-backend",
            "aot_eager",
            "--peak-shapes",
            "64,64,64",
            "--warmup",
            "0",
            "--iters",
            "1",
            "--json",
            str(out),
        ]
    )
    assert out.exists()
    assert (r["tokens"], r["local_tokens"], r["rows"], r["layers"]) == (75, 10, 2, 2)
    cfg = step.MODELS["tiny"]
    assert r["flops_per_forward"] == forward_flops(cfg, 10, rows=2, key_tokens=75).total
    agree = r["agreement"]
    # The same weights and the same loopback exchange: diffusers computes our function. fp32
    # on CPU differs only by reduction order (~3e-7 measured); a wrong rope or layout is O(1).
    assert agree["diffusers native"] <= 1e-5
    # Fusing q/k/v splits one GEMM's output exactly; aot_eager runs the captured graphs'
    # aten ops as eager does: both equal to float32 reduction order.
    assert agree["ours eager, fused q/k/v"] <= 1e-6
    assert agree["ours compiled, fused q/k/v"] <= 1e-6
    assert not r["errors"]
    assert set(r["variants"]) == {
        "ours eager, q/k/v separate",
        "ours eager, fused q/k/v",
        "ours compiled, fused q/k/v",
        "diffusers native",
    }


def test_step_benchmark_refuses_what_it_cannot_measure():
    with pytest.raises(SystemExit, match="hours per forward"):
        step.main(["--model", "a14b", "--device", "cpu"])
    with pytest.raises(SystemExit, match="ulysses=8 does not divide"):
        step.run(step.parse(["--model", "tiny", "--mesh", "ulysses8", "--device", "cpu"]))


def test_fused_qkv_leaves_the_tree_alone_and_runs_on_jax():
    """The fused tree drives the same model code on the JAX backend (models/ picks `to_qkv`
    when present), and fusing does not touch the input tree."""
    import jax.numpy as jnp

    from parallel_wan.backends.jax import ops as jops

    cfg = step.MODELS["tiny"]
    params = unflatten(step.build_diffusers(cfg, 1, torch.float32, torch.device("cpu"), 1).state_dict())
    fused = fuse_qkv(params)
    assert set(params["blocks"][0]["attn1"]) >= {"to_q", "to_k", "to_v"}
    assert "to_qkv" in fused["blocks"][0]["attn1"] and "to_q" not in fused["blocks"][0]["attn1"]
    block, fblock = params["blocks"][0]["attn1"], fused["blocks"][0]["attn1"]
    to_jax = lambda tree: map_leaves(lambda name, v: jnp.asarray(v.numpy()), tree)  # noqa: E731
    x = np.random.default_rng(0).standard_normal((2, 6, cfg.dim)).astype(np.float32)
    cos, sin = rope_tables(cfg.attention_head_dim, (1, 2, 3))
    outs = []
    for tree in (block, fblock):
        outs.append(
            np.asarray(
                dit.self_attention_block(
                    to_jax(tree), jnp.asarray(x), (jnp.asarray(cos), jnp.asarray(sin)), cfg, jops, jops.attention
                )
            )
        )
    ref = dit.self_attention_block(
        block, torch.as_tensor(x), (torch.as_tensor(cos), torch.as_tensor(sin)), cfg, ops, ops.attention
    ).numpy()
    # float32, different GEMM blocking (one 3·dim GEMM vs three) and backends: ~1e-7 relative.
    for out in outs:
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


def test_comm_measures_bandwidth_on_ranks_and_predicts_from_the_byte_model(tmp_path, capsys):
    from processes.gloo_ranks import spawn_ranks

    results = spawn_ranks(comm.measure_on_rank, 2, [0.01], 2)
    bw = results[0]
    assert results[1] is None and bw["world"] == 2 and bw["backend"] == "gloo"
    assert {r["kind"] for r in bw["rows"]} == {"a2a", "p2p"} and bw["a2a_gbps"] > 0 and bw["p2p_gbps"] > 0

    # Prediction: compute from a step.py result for ulysses8, the link given.
    link = comm.Link(a2a_gbps=350.0, p2p_gbps=380.0, source="given")
    measured = {"layer_s": 0.05, "tflops": 600.0, "device": "test", "tokens": 75_600}
    cfg = TransformerConfig()
    u8 = comm.predict(load_preset("ulysses8"), cfg, A14B, 75_600, link, measured, 600.0)
    ulysses_bytes = analytic(load_preset("ulysses8"), 75_600, A14B).ulysses  # 677.38 MB (BENCHMARKS.md)
    assert u8.ulysses_layer_s == ulysses_bytes / 350e9
    assert u8.denoise_s == pytest.approx(40 * 40 * (0.05 + ulysses_bytes / 350e9))
    # A mesh without a measurement is computed at the given rate from its FLOPs.
    r8 = comm.predict(load_preset("ring8"), cfg, A14B, 75_600, link, None, 600.0)
    assert r8.compute_layer_s == forward_flops(cfg, 9_450, rows=2, key_tokens=75_600).layer / 600e12
    assert r8.ring_exposed_layer_s == 0.0  # a 387 MB hop (1 ms) hides behind 1/8 of the attention

    step_json = tmp_path / "u8.json"
    step_json.write_text(
        __import__("json").dumps(
            {
                "model": "a14b",
                "mesh": {"name": "ulysses8"},
                "tokens": 75_600,
                "device": "test",
                "variants": {"ours": [2.0, 2.0]},
                "fastest_ours": "ours",
                "flops_per_layer": 1.0,
                "flops_per_forward": 40.0,
            }
        )
    )
    comm.main(["--link", "h100-nvlink", "--step-json", str(step_json), "--presets", "ulysses8", "ring8"])
    text = capsys.readouterr().out
    assert "| ulysses8 | 8 | 50.00 (measured)" in text and "assumed h100-nvlink" in text
