"""sparse=radial's mask (parallel/radial_mask.py) against Radial Attention's own, and its cut to
one attention call's slices (parallel/block_visits.py).

The expected masks were printed by Radial Attention's `gen_log_mask_shrinked`
(mit-han-lab/radial-attention, radial_attn/attn_mask at commit 72788d4; its mask functions
run on CPU torch) with model_type="wan", sparse_type="radial", s = video_token_num = F·H·W.
The same comparison over 286 random shapes (1–13 frames, 8–192 tokens a frame, blocks 16–128,
decay 0.2–1) found no difference outside the diagonal blocks added for frames under a third of
a block (test below); A14B-like 768×1280 × 77 frames (20 × 3840 tokens, block 64, decay 0.8)
is equal too (theirs takes 100 s there, this 0.3 s)."""

import numpy as np

from parallel_wan.parallel.block_visits import BlockMask
from parallel_wan.parallel.radial_mask import radial_mask

# grid (5, 8, 16), 640 tokens, block 16, decay_factor 0.5: their printout, '#' = visited
THEIRS_5x8x16 = [
    "###################.............##......",
    "####################............###.....",
    "#####################............###....",
    "################.#####............###...",
    "################..#####............###..",
    "################...#####............###.",
    "################....####.............###",
    "################.....###..............##",
    "###########################.............",
    "############################............",
    "#############################...........",
    "########################.#####..........",
    "########################..#####.........",
    "########################...#####........",
    "########################....####........",
    "########################.....###........",
    "###################################.....",
    "####################################....",
    "#####################################...",
    "################################.#####..",
    "################################..#####.",
    "################################...#####",
    "################################....####",
    "################################.....###",
    "###########.....########################",
    "############....########################",
    "#############...########################",
    "########.#####..########################",
    "########..#####.########################",
    "########...#############################",
    "########....############################",
    "########.....###########################",
    "########........###.....################",
    "########........####....################",
    "########........#####...################",
    "########.........#####..################",
    "########..........#####.################",
    "########...........#####################",
    "########............####################",
    "########.............###################",
]


def _mask(rows):
    return np.array([[c == "#" for c in row] for row in rows])


def test_the_mask_is_radial_attentions():
    mask = radial_mask(640, (5, 8, 16), 16, 0.5)
    assert np.array_equal(mask, _mask(THEIRS_5x8x16))
    # what the paper describes, read off it: frame 0 is a sink (every query block sees all of
    # it), neighbouring frames are whole, frames 2 apart a band, 3 apart dropped (the split rule)
    frame = 8  # blocks a frame
    assert mask[:, :frame].all()
    assert mask[2 * frame : 3 * frame, 1 * frame : 4 * frame].all()
    assert not mask[4 * frame : 5 * frame, 1 * frame : 2 * frame].any()
    assert 0.75 < mask.mean() < 0.77  # 1216 of 1600 block pairs


def test_a_partial_last_block_is_dense_and_tiny_frames_keep_their_diagonal():
    # 650 tokens: the video's 640 and 10 more (S2V's extra tokens): block 40 is partial and dense
    mask = radial_mask(650, (5, 8, 16), 16, 0.5)
    assert mask.shape == (41, 41) and mask[40].all() and mask[:, 40].all()
    assert np.array_equal(mask[:40, :40], _mask(THEIRS_5x8x16))
    # 16-token frames under 64-token blocks: theirs visits nothing at all ([[0, 0], [0, 0]]),
    # which leaves every query without a key; the diagonal is added
    assert np.array_equal(radial_mask(128, (8, 4, 4), 64, 1.0), np.eye(2, dtype=bool))


def test_visits_cut_at_any_positions_give_back_the_mask():
    """A rank's queries and a ring step's keys start anywhere (not on block boundaries): the
    global blocks each call visits, with their tokens, cover the token mask exactly once."""
    block, tokens = 16, 650
    bm = BlockMask(radial_mask(tokens, (5, 8, 16), block, 0.5), block, tokens)
    want = np.repeat(np.repeat(bm.mask, block, 0), block, 1)[:tokens, :tokens]
    local = 163  # 4 ranks of 163 tokens (652: 2 padding), or 2 ring members of 326 after Ulysses
    for length in (local, 2 * local):
        got = np.zeros((tokens, tokens), dtype=int)
        for q0 in range(0, tokens, length):
            for k0 in range(0, tokens, length):
                keys = max(0, min(length, tokens - k0))
                v = bm.visits(q0, length, k0, keys)
                assert v.first_q_block == q0 // block
                for p, (row, n) in enumerate(zip(v.table, v.counts)):
                    for kb in row[:n]:
                        r = np.arange((v.first_q_block + p) * block, (v.first_q_block + p + 1) * block)
                        c = np.arange(kb * block, (kb + 1) * block)
                        r = r[(r >= q0) & (r < min(q0 + length, tokens))]
                        c = c[(c >= k0) & (c < k0 + keys)]
                        got[np.ix_(r, c)] += 1
        assert np.array_equal(got, want.astype(int)), length
    # a call whose queries see none of its keys is empty (a ring step to skip)
    assert bm.visits(32 * block, block, 20 * block, block).empty  # frame 4 → the middle of frame 2
    assert not bm.visits(0, block, 600, 50).empty


def test_density_and_the_flops_skipped():
    bm = BlockMask(radial_mask(650, (5, 8, 16), 16, 0.5), 16, 650)
    visited = np.repeat(np.repeat(bm.mask, 16, 0), 16, 1)[:650, :650].sum()
    assert bm.visited_pairs() == visited
    assert bm.skipped_flops(rows=2, heads=3, head_dim=8) == 4 * 2 * 3 * 8 * (650 * 650 - visited)
    assert bm.block_density() == bm.mask.mean()
