"""sparse=svg's mask and orders (parallel/svg_mask.py) against Sparse-VideoGen's own rules
(svg-project/Sparse-VideoGen at commit 5ce7b01), restated here from their code as they wrote it:

- `generate_temporal_head_mask_mod` (svg/models/wan/utils.py): token (q, kv) attends iff
  |q − kv| ≤ round_to_multiple(mul · token_per_frame) (up to a multiple of 128) or
  kv < token_per_frame — with context_length 0, as their Wan inference sets it;
- `sparsity_to_width` (same file): width_frame = seq_len · (1 − √(1 − sparsity)) / frame_size;
- `wan_token_reorder_to_token_major` (svg/models/wan/placement.py): reshape (F, S) → transpose
  → (S, F)."""

import math

import numpy as np
import pytest

from parallel_wan.parallel.svg_mask import band_width, svg_mask, token_major_order


def _their_width_frames(sparsity, context_length, num_frame, frame_size):
    seq_len = context_length + num_frame * frame_size
    total_elements = seq_len**2
    sparsity = (sparsity * total_elements - 2 * seq_len * context_length) / total_elements
    width = seq_len * (1 - math.sqrt(1 - sparsity))
    return width / frame_size


def _their_token_mask(tokens, frame_tokens, mul):
    two_frame = math.ceil(mul * frame_tokens / 128) * 128
    q = np.arange(tokens)[:, None]
    kv = np.arange(tokens)[None, :]
    return (np.abs(q - kv) <= two_frame) | (kv < frame_tokens)


def _block_closure(token_mask, block):
    """The smallest block mask holding the token mask: a block pair with any attended pair."""
    n = token_mask.shape[0]
    nb = -(-n // block)
    padded = np.zeros((nb * block, nb * block), dtype=bool)
    padded[:n, :n] = token_mask
    return padded.reshape(nb, block, nb, block).any((1, 3))


SHAPES = [  # (frames, frame tokens, block, density)
    (5, 136, 16, 0.3),  # the tests' tiny video: 680 tokens
    (5, 136, 64, 0.3),
    (3, 100, 32, 0.05),  # a band under one 128-token step
    (7, 90, 16, 0.6),
    (13, 48, 128, 0.25),  # blocks wider than a frame
    (21, 60, 64, 0.3),  # A14B's 21 latent frames
    (4, 256, 16, 0.9),
]


@pytest.mark.parametrize("frames, frame_tokens, block, density", SHAPES)
def test_the_mask_is_the_block_closure_of_their_token_mask(frames, frame_tokens, block, density):
    tokens = frames * frame_tokens
    mul = _their_width_frames(density, 0, frames, frame_tokens)
    assert band_width(tokens, density) == math.ceil(mul * frame_tokens / 128) * 128
    theirs = _their_token_mask(tokens, frame_tokens, mul)
    ours = svg_mask(tokens, frame_tokens, block, density)
    assert np.array_equal(ours, _block_closure(theirs, block))
    # what the kernel computes holds theirs, and the band was asked for at least as dense
    assert ours.mean() >= min(1.0, density) - 1e-9


def test_the_temporal_order_is_theirs_and_leaves_padding_where_it_is():
    frames, frame_tokens, length = 3, 5, 17
    order = token_major_order(frames, frame_tokens, length)
    theirs = np.arange(frames * frame_tokens).reshape(frames, frame_tokens).T.reshape(-1)
    assert np.array_equal(order[:15], theirs)
    assert np.array_equal(order[15:], [15, 16])
    # a temporal head's neighbours: the same place of consecutive frames
    assert list(order[:3]) == [0, 5, 10]


def test_an_a14b_720p_mask():
    """T2V-A14B at 1280×720 × 81 frames (21 × 3600 tokens), block 64, their 720p density 0.3:
    a band of 12,416 tokens either side and frame 0 — 34 % of the blocks (radial's: 35 %)."""
    tokens = 21 * 3600
    mask = svg_mask(tokens, 3600, 64, 0.3)
    assert band_width(tokens, 0.3) == 12416
    assert mask.shape == (1182, 1182)
    assert 0.335 < mask.mean() < 0.345, mask.mean()


@pytest.mark.parametrize("density", [0, 1.5, -0.1])
def test_a_density_outside_zero_one_is_refused(density):
    with pytest.raises(ValueError, match="density"):
        band_width(100, density)
