"""parallel_wan/text/tokenizer.py: a folder holding a plain `tokenizers` tokenizer (the built-in
model's) is read without transformers and gives AutoTokenizer's tokens and masks exactly;
every other folder goes to AutoTokenizer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from harness.paths import REPO

from parallel_wan.builtin import tiny
from parallel_wan.text.tokenizer import PlainTokenizer, TransformersTokenizer, load_tokenizer
from parallel_wan.text.umt5 import DEFAULT_NEGATIVE_PROMPT, TEXT_LEN

# Empty, one word, > 512 tokens (truncated, the eos kept last), non-Latin (<unk>), the special
# tokens typed into the text, odd whitespace, characters NFKC changes, one token short of the
# length and one over it.
WORDS = " ".join(f"w{i}" for i in range(600))
PROMPTS = [
    "",
    "cat",
    " ".join(["a red fox jumps over the lazy dog"] * 90),
    "一只猫在海滩上奔跑",
    "Кошка бежит",
    "a </s> b <pad> c <unk>",
    "  tabs\tand\nnew lines  ",
    "ﬁne ① Ｆｕｌｌ",
    DEFAULT_NEGATIVE_PROMPT,
    WORDS,
]


@pytest.fixture(scope="module")
def folder(tiny_t2v):
    return tiny_t2v.layouts["diffusers"] / "tokenizer"


def _reference(folder, prompts, length):
    from transformers import AutoTokenizer

    tokens = AutoTokenizer.from_pretrained(str(folder))(
        prompts,
        padding="max_length",
        max_length=length,
        truncation=True,
        add_special_tokens=True,
        return_attention_mask=True,
        return_tensors="pt",
    )
    return tokens.input_ids, tokens.attention_mask


@pytest.mark.parametrize("length", [TEXT_LEN, 7])
def test_the_built_in_tokenizer_reads_without_transformers_and_equals_autotokenizer(folder, length):
    ours = load_tokenizer(folder)
    assert isinstance(ours, PlainTokenizer)
    ids, mask = ours(PROMPTS, length)
    want_ids, want_mask = _reference(folder, PROMPTS, length)
    assert ids.dtype == want_ids.dtype == torch.long and mask.dtype == want_mask.dtype
    assert torch.equal(ids, want_ids) and torch.equal(mask, want_mask)
    assert (ids[:, -1] != 0).any() and (ids == 0).any()  # some rows fill the length, others are padded
    # one prompt at a time, and calls at another length in between, give the same rows
    ours([PROMPTS[0]], length + 3)
    for row, prompt in enumerate(PROMPTS):
        one_ids, one_mask = ours([prompt], length)
        assert torch.equal(one_ids[0], want_ids[row]) and torch.equal(one_mask[0], want_mask[row])


def test_both_layouts_and_the_vocabulary_size(tiny_t2v):
    from transformers import AutoTokenizer

    official = tiny_t2v.layouts["official"] / "google" / "umt5-xxl"
    assert isinstance(load_tokenizer(official), PlainTokenizer)
    assert torch.equal(load_tokenizer(official)(PROMPTS, TEXT_LEN)[0], _reference(official, PROMPTS, TEXT_LEN)[0])
    # the planner sizes the tiny text encoder from tokenizer_size(), the builder from the tokenizer
    assert tiny.tokenizer_size() == len(tiny.build_tokenizer()) == len(load_tokenizer(official))
    assert len(AutoTokenizer.from_pretrained(str(official))) == tiny.tokenizer_size()


def _copy(folder, tmp_path, **config_changes):
    copy = tmp_path / "tokenizer"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "tokenizer_config.json").read_text())
    for key, value in config_changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize(
    "changes",
    [
        {"tokenizer_class": "T5TokenizerFast"},  # a class with logic of its own (the UMT5 checkpoints')
        {"padding_side": "left"},
        {"extra_special_tokens": ["<x>"]},  # a setting this module does not implement
        {"pad_token": None},
        {"pad_token": {"content": "<pad>", "special": True}},
    ],
    ids=["t5-class", "left-padding", "unknown-key", "no-pad-token", "pad-token-dict"],
)
def test_any_other_folder_goes_to_autotokenizer(folder, tmp_path, changes):
    copy = _copy(folder, tmp_path, **changes)
    assert PlainTokenizer.from_folder(copy) is None
    if "pad_token" in changes or "extra_special_tokens" in changes:
        return  # what AutoTokenizer makes of these is its own business; only the dispatch is checked
    ours = load_tokenizer(copy)
    assert isinstance(ours, TransformersTokenizer)
    ids, mask = ours(PROMPTS[:4], 16)
    want_ids, want_mask = _reference(copy, PROMPTS[:4], 16)
    assert torch.equal(ids, want_ids) and torch.equal(mask, want_mask)


def test_a_folder_without_tokenizer_json_or_with_a_broken_one_goes_to_autotokenizer(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    (copy / "tokenizer.json").write_text("{not json")
    assert PlainTokenizer.from_folder(copy) is None
    (copy / "tokenizer.json").unlink()
    assert PlainTokenizer.from_folder(copy) is None


def test_a_run_process_encodes_without_importing_transformers(tiny_t2v):
    """The point of the plain path: the text encoder of the built-in model loads and encodes in a
    process that never imports transformers (1.3 CPU seconds), nor diffusers."""
    code = (
        "import sys; from parallel_wan.weights.layout import describe_checkpoint; "
        "from parallel_wan.text.umt5 import TextEncoder; "
        f"e = TextEncoder.load(describe_checkpoint({str(tiny_t2v.diffusers)!r}), 'float32'); "
        "out = e.encode(['a cat', '']); "
        "print(tuple(out.shape), sorted(m for m in ('transformers', 'diffusers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("[]"), done.stdout
    assert f"(2, {TEXT_LEN}," in done.stdout
