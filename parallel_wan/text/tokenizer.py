"""A checkpoint's tokenizer, as the references call it: padded to a fixed length, truncated,
with the special tokens, returning (input_ids, attention_mask).

Most tokenizer folders name a class with logic of its own (the UMT5 checkpoints: `T5Tokenizer`):
those load with transformers' AutoTokenizer, as diffusers' WanPipeline loads them. A folder that
names transformers' plain wrapper of the `tokenizers` library (`TokenizersBackend`, or
`PreTrainedTokenizerFast` before transformers 5) holds nothing but its `tokenizer.json` and the
names of its special tokens (the built-in tiny model writes such a folder): transformers would
only call `tokenizers` with the same padding and truncation, so it is read with `tokenizers`
alone. Importing transformers' tokenizer machinery costs 1.3-1.4 CPU seconds per process, as
much as the built-in model's whole run after torch is imported, and every CLI run, server start
and preempted job's restart paid it. Anything else in such a config (a padding side, extra
special tokens, a setting this module does not know) sends the folder to AutoTokenizer.
tests/unit/test_tokenizer.py checks both paths against AutoTokenizer token for token.
"""

from __future__ import annotations

import json
from pathlib import Path

PLAIN_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
# tokenizer_config.json keys whose meaning is implemented here; any other key → AutoTokenizer.
# (`added_tokens_decoder` repeats tokenizer.json's added tokens; `clean_up_tokenization_spaces`
# acts on decoding only; the sides must be "right", the only one handled.)
_KNOWN = {
    "backend",
    "tokenizer_class",
    "pad_token",
    "eos_token",
    "unk_token",
    "model_max_length",
    "added_tokens_decoder",
    "clean_up_tokenization_spaces",
    "padding_side",
    "truncation_side",
}


def load_tokenizer(folder: str | Path):
    """The tokenizer of `folder`: a PlainTokenizer where the folder allows it, else
    transformers' AutoTokenizer wrapped to the same call."""
    folder = Path(folder)
    plain = PlainTokenizer.from_folder(folder)
    if plain is not None:
        return plain
    from transformers import AutoTokenizer

    return TransformersTokenizer(AutoTokenizer.from_pretrained(str(folder)))


class TransformersTokenizer:
    """transformers' tokenizer, called as the references call it."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, texts: list[str], length: int):
        tokens = self.tokenizer(
            texts,
            padding="max_length",
            max_length=length,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        return tokens.input_ids, tokens.attention_mask

    def __len__(self) -> int:
        return len(self.tokenizer)


class PlainTokenizer:
    """A `tokenizers.Tokenizer` padded on the right with the pad token to `length`, truncated on
    the right to `length` with the post-processor's special tokens counted in: what
    transformers' fast tokenizers set on it for `padding="max_length", truncation=True`."""

    def __init__(self, tokenizer, pad_token: str):
        self.tokenizer = tokenizer
        self.pad_token = pad_token
        self.pad_id = tokenizer.token_to_id(pad_token)
        if self.pad_id is None:
            raise ValueError(f"the pad token {pad_token!r} is not in the tokenizer's vocabulary")
        self._length = None

    @classmethod
    def from_folder(cls, folder: Path) -> PlainTokenizer | None:
        """The folder's tokenizer when its config names the plain wrapper and only settings
        handled here; else None."""
        config_file, tokenizer_file = folder / "tokenizer_config.json", folder / "tokenizer.json"
        if not (config_file.is_file() and tokenizer_file.is_file()):
            return None
        try:
            config = json.loads(config_file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None  # AutoTokenizer gives its own error
        if not isinstance(config, dict) or config.get("tokenizer_class") not in PLAIN_CLASSES:
            return None
        if set(config) - _KNOWN or config.get("backend", "tokenizers") != "tokenizers":
            return None
        if config.get("padding_side", "right") != "right" or config.get("truncation_side", "right") != "right":
            return None
        if not isinstance(config.get("pad_token"), str):
            return None  # no pad token, or one given as an AddedToken dict: AutoTokenizer decides
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception:  # the tokenizers library raises plain Exceptions on a bad file
            return None  # AutoTokenizer reads it again and reports it in its words
        if tokenizer.token_to_id(config["pad_token"]) is None:
            return None
        return cls(tokenizer, config["pad_token"])

    def __call__(self, texts: list[str], length: int):
        import torch

        if self._length != length:
            self.tokenizer.enable_truncation(length, stride=0, strategy="longest_first", direction="right")
            self.tokenizer.enable_padding(
                direction="right", pad_id=self.pad_id, pad_type_id=0, pad_token=self.pad_token, length=length
            )
            self._length = length
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        ids = torch.tensor([e.ids for e in encodings], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.long)
        return ids, mask

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)
