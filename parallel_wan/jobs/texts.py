"""A job's texts, encoded once up front: each entry's prompt and negative prompt go through
UMT5 as the one batched call a single run makes (so its rows are bit for bit a single run's),
the encoder is then released (≈11 GB in bf16 for XXL, not kept beside the experts while they
denoise), and each entry takes its rows from host memory (4 MB per text in bf16 at 512 × 4096).
Entries with the same texts share one encoding."""

from __future__ import annotations


def encode_job_texts(specs, loaded, backend):
    """The texts source of the job (pipeline/text_sources.py EncodedUpFront: (texts…) → (n,
    text_len, dim) CPU tensor) on the rank that encodes (backend.encodes_text); None elsewhere."""
    if not backend.encodes_text:
        return None
    from ..pipeline.generate import texts_of
    from ..pipeline.text_sources import EncodedUpFront

    rows = {}
    for spec in specs:
        key = tuple(texts_of(spec))
        if key not in rows:
            rows[key] = loaded.text_encoder.encode(list(key)).cpu()
    loaded.text_encoder.release()
    return EncodedUpFront(rows)
