"""Prompt cleaning, as both references do it before tokenizing.

diffusers' WanPipeline (`prompt_clean`) and the official tokenizer wrapper (clean="whitespace")
apply the same steps: ftfy's mojibake repair (diffusers only when ftfy is installed; the
official code always, so install ftfy to match it exactly), HTML unescaping twice, and
collapsing whitespace runs with the `regex` module's Unicode notion of whitespace.
"""

from __future__ import annotations

import html

try:  # transformers depends on `regex`; its \s differs from `re`'s on a few control characters
    import regex as re
except ImportError:  # pragma: no cover
    import re

try:
    import ftfy
except ImportError:  # optional, as in diffusers
    ftfy = None


def clean_prompt(text: str) -> str:
    if ftfy is not None:
        text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()
