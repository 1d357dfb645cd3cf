"""UMT5 text encoding: the same embeddings as diffusers' WanPipeline.encode_prompt, from
either checkpoint layout, with prompt and negative prompt in one batched call."""

from __future__ import annotations

import re

import pytest
import torch

from parallel_wan.builtin.tiny import build_tiny, write_checkpoint
from parallel_wan.text.clean import clean_prompt
from parallel_wan.text.umt5 import DEFAULT_NEGATIVE_PROMPT, TEXT_LEN, TextEncoder
from parallel_wan.weights.layout import describe_checkpoint

PROMPTS = [
    "A cat and a dog   play on the beach at sunset,\n slow motion &amp;amp; cinematic light.",
    DEFAULT_NEGATIVE_PROMPT,
]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny("t2v", seed=1)


@pytest.fixture(scope="module")
def checkpoints(tiny, tmp_path_factory):
    return {
        layout: describe_checkpoint(write_checkpoint(tiny, tmp_path_factory.mktemp(layout), layout))
        for layout in ("diffusers", "official")
    }


def _reference(tiny, prompt, negative):
    from diffusers import WanPipeline

    pipe = WanPipeline(tokenizer=tiny.tokenizer, text_encoder=tiny.text_encoder, vae=None, scheduler=None)
    return pipe.encode_prompt(
        prompt,
        negative,
        do_classifier_free_guidance=True,
        max_sequence_length=TEXT_LEN,
        device=torch.device("cpu"),
        dtype=torch.float32,
    )


def test_matches_wan_pipeline_encode_prompt(tiny, checkpoints):
    encoder = TextEncoder.load(checkpoints["diffusers"], dtype="float32")
    ours = encoder.encode(PROMPTS)
    positive, negative = _reference(tiny, PROMPTS[0], PROMPTS[1])
    assert ours.shape == (2, TEXT_LEN, tiny.text_encoder.config.d_model) and ours.dtype == torch.float32
    # Same weights and ops; the batch of two vs diffusers' two batches of one may reorder
    # fp32 sums, so allow relative error 1e-6 (observed: bitwise equal on CPU).
    for got, want in ((ours[0], positive[0]), (ours[1], negative[0])):
        assert ((got - want).norm() / want.norm()).item() <= 1e-6
    # padded slots are exact zeros after each prompt's real tokens
    lengths = (ours.abs().sum(-1) > 0).sum(-1)
    assert 0 < lengths[0] < TEXT_LEN and torch.count_nonzero(ours[0, lengths[0] :]) == 0


def test_truncates_long_prompts_like_diffusers(tiny, checkpoints):
    long_prompt = " ".join(["cat dog"] * 400)
    encoder = TextEncoder.load(checkpoints["diffusers"], dtype="float32")
    ours = encoder.encode([long_prompt, ""])
    positive, negative = _reference(tiny, long_prompt, "")
    assert torch.count_nonzero(ours[0].abs().sum(-1)) == TEXT_LEN
    assert ((ours[0] - positive[0]).norm() / positive[0].norm()).item() <= 1e-6
    assert ((ours[1] - negative[0]).norm() / negative[0].norm()).item() <= 1e-6


def test_official_layout_encodes_identically(checkpoints):
    a = TextEncoder.load(checkpoints["diffusers"], dtype="float32").encode(PROMPTS)
    b = TextEncoder.load(checkpoints["official"], dtype="float32").encode(PROMPTS)
    assert torch.equal(a, b)


def test_bf16_encoder_outputs_bf16(checkpoints):
    encoder = TextEncoder.load(checkpoints["official"], dtype="bfloat16")
    out = encoder.encode(PROMPTS[:1])
    assert out.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in encoder.model.parameters())


def test_release_frees_the_encoder(checkpoints):
    encoder = TextEncoder.load(checkpoints["diffusers"], dtype="float32")
    encoder.encode(["a cat"])
    encoder.release()
    assert encoder.model is None
    with pytest.raises(RuntimeError, match="released"):
        encoder.encode(["a cat"])


def test_clean_prompt_matches_diffusers():
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    for text in (PROMPTS[0], "  tabs\tand\u3000ideographic spaces\x1c ", "&lt;b&gt; bold", DEFAULT_NEGATIVE_PROMPT):
        assert clean_prompt(text) == prompt_clean(text)


def test_default_negative_prompt_is_the_official_one():
    from harness.official_wan import official_wan_dir

    path = official_wan_dir() / "configs" / "shared_config.py"
    official = re.search(r"sample_neg_prompt = '([^']*)'", path.read_text()).group(1)
    assert DEFAULT_NEGATIVE_PROMPT == official


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_encoder_is_transformers_umt5_bit_for_bit(tiny, checkpoints, dtype):
    """parallel_wan/text/umt5_encoder.py against transformers' UMT5EncoderModel (the class
    diffusers' WanPipeline runs) with the same weights: equal bit for bit, with padding and
    without (a prompt of all 512 tokens), in each dtype a run may ask for (float16 keeps the FFN
    output projections in float32, as transformers does)."""
    import copy

    reference = copy.deepcopy(tiny.text_encoder).to(getattr(torch, dtype))
    if dtype == "float16":  # the projections' float32 weights themselves, not widened float16 ones
        for block, source in zip(reference.encoder.block, tiny.text_encoder.encoder.block):
            block.layer[1].DenseReluDense.wo.weight.data = source.layer[1].DenseReluDense.wo.weight.data.clone()
    ours = TextEncoder.load(checkpoints["diffusers"], dtype=dtype)
    for prompts in (PROMPTS, [" ".join(["cat dog"] * 400)]):
        tokens = tiny.tokenizer(
            prompts,
            padding="max_length",
            max_length=TEXT_LEN,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        with torch.no_grad():
            want = reference(tokens.input_ids, tokens.attention_mask).last_hidden_state
            got = ours.model(tokens.input_ids, tokens.attention_mask)
        assert got.dtype == want.dtype == getattr(torch, dtype)
        assert torch.equal(got, want), (dtype, (got.float() - want.float()).abs().max().item())
    assert bool(tokens.attention_mask.all())  # the long prompt took the path without a mask
