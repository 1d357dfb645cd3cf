"""Where a generation takes its texts' rows (the prompts', then the negative prompt's, as
`generate.texts_of` lists them) when the caller has them another way than the one encoding a
single run makes (encode, then release the encoder: `Loaded.texts` None). Two sources:

- `EncodedUpFront`: a job's texts, every entry's encoded once before the first video, in the
  one batched call a single run makes, the encoder then released (jobs/texts.py);
- `EncodedOnDemand`: a server's, each request's texts encoded when its job runs, the encoder
  kept loaded for the next (serve/worker.py).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class TextSource(Protocol):
    def rows(self, texts: tuple[str, ...]):
        """The (len(texts), text_len, dim) encoder rows of `texts`, in order, on any device."""


class EncodedUpFront:
    """Rows encoded before the first video: texts → rows, every key a `texts_of` tuple."""

    def __init__(self, rows: dict):
        self.encoded = rows

    def rows(self, texts: tuple[str, ...]):
        return self.encoded[texts]


class EncodedOnDemand:
    """Each call encodes its texts in one batched call; the encoder stays loaded."""

    def __init__(self, encoder):
        self.encoder = encoder

    def rows(self, texts: tuple[str, ...]):
        return self.encoder.encode(list(texts))
