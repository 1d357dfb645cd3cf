"""With several settings wrong, the first refusal a user sees is always the same one:
config/resolve.py reads its sections in the order its checks have always fired. Every pair of
the wrong settings below is refused for the earlier one, so moving a check across another
(e.g. when a section gets its own function) fails here."""

import itertools

import pytest

from parallel_wan.config import ConfigError, resolve
from parallel_wan.config.compose import compose_settings

# One wrong value per step of resolve(), in the order the refusals fire, and the setting each
# refusal begins with.
IN_ORDER = [
    (["recipe=turbo"], "recipe"),
    (["backend.name=tensorflow"], "backend"),
    (["mesh=usp2x2"], "mesh"),
    (["num_frames=9.5"], "num_frames"),
    (["steps=many"], "steps"),
    (["shift=abc"], "shift"),
    (["seed=abc"], "seed"),
    (["height=100"], "height"),
    (["guidance_low=-1"], "guidance_low"),
    (["image=/no/such.png"], "image"),
    (["checkpoint_dir=/no/such/dir"], "checkpoint_dir"),
    (["dtype=int8"], "dtype"),
    (["attention_impl=flashy"], "attention_impl"),
    (["prompt=[]"], "prompt"),
    (["memory=disk"], "memory"),
    (["quantize=banana"], "quantize"),
    (["negative_prompt=[a,b]"], "negative_prompt"),
    (["sampler=ddim"], "sampler"),
    (["schedule=karras"], "schedule"),
    (["cache=fbcache", "cache.threshold=-1"], "cache.threshold"),
    (["compile=maybe"], "compile"),
    (["dist_timeout_s=0"], "dist_timeout_s"),
    (["save_frames=2"], "save_frames"),
]


def _refusal(cfg: dict) -> str:
    with pytest.raises(ConfigError) as err:
        resolve({**cfg, "output_dir": "/tmp/unused"})
    return str(err.value)


@pytest.fixture(scope="module")
def composed():
    """The defaults, the settings each case changes, and each case's refusal alone."""
    base = compose_settings([])
    changed = []
    for overrides, _ in IN_ORDER:
        cfg = compose_settings(overrides)
        changed.append({k: v for k, v in cfg.items() if v != base.get(k)})
    return base, changed, [_refusal({**base, **change}) for change in changed]


def test_each_wrong_setting_alone_is_refused_by_name(composed):
    _, _, alone = composed
    for (overrides, key), refusal in zip(IN_ORDER, alone, strict=True):
        assert refusal.startswith(key + "="), (overrides, refusal)


def test_the_earlier_of_two_wrong_settings_is_refused_first(composed):
    base, changed, alone = composed
    for a, b in itertools.combinations(range(len(IN_ORDER)), 2):
        refusal = _refusal({**base, **changed[b], **changed[a]})
        assert refusal == alone[a], (IN_ORDER[a][0], IN_ORDER[b][0], refusal)
