"""A model variant has one owner (issue 39 item 1): the registry's architecture, named by the
preset (`architecture:`), holds its variant (models/variants.py: inputs, per-token timesteps,
experts) and its dimensions, and every layer asks by that name — never by task — so a second
architecture of a task keeps its own dimensions through every check."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from harness.paths import PACKAGE, REPO
from harness.settings import raw_config, spec_for

from parallel_wan.config import ConfigError, model_preset
from parallel_wan.models import registry
from parallel_wan.models.experts import ONE_EXPERT, TWO_EXPERTS
from parallel_wan.models.latent import size_multiple
from parallel_wan.models.variants import T2V

TINY_VIDEO = ["height=64", "width=64", "num_frames=5"]


@pytest.fixture
def wide(monkeypatch):
    """A second text-to-video architecture, registered under its own name for this test: wider
    heads, a wider FFN and one more block than `tiny`."""
    tiny = registry.ARCHITECTURES["tiny"]
    transformer = dataclasses.replace(
        tiny.transformer, num_attention_heads=4, attention_head_dim=64, ffn_dim=4096, num_layers=3
    )
    arch = dataclasses.replace(tiny, name="tiny_wide", transformer=transformer)
    assert arch.variant == T2V
    monkeypatch.setitem(registry.ARCHITECTURES, "tiny_wide", arch)
    return arch


def _spec(*overrides):
    return spec_for("model=tiny", *TINY_VIDEO, *overrides)


@pytest.mark.parametrize("name", sorted(registry.ARCHITECTURES))
def test_every_architecture_takes_the_channels_its_variant_and_vae_decide(name):
    arch = registry.ARCHITECTURES[name]
    assert arch.transformer.out_channels == arch.vae.z_dim
    assert arch.transformer.in_channels == arch.variant.in_channels(arch.vae)
    assert arch.variant.experts in (TWO_EXPERTS, ONE_EXPERT)
    assert (arch.boundary is None) == (len(arch.variant.experts) == 1)


def test_every_preset_names_a_registered_architecture_and_restates_none_of_its_facts():
    presets = sorted((Path(REPO) / "conf" / "model").glob("*.yaml"))
    assert presets
    for path in presets:
        assert not {"task", "experts", "size_multiple"} & set(yaml.safe_load(path.read_text())), path.name
        preset = model_preset(raw_config([f"model={path.stem}"])["model"])
        arch = registry.architecture(preset.architecture)
        assert (preset.task, preset.experts) == (arch.variant.task, len(arch.variant.experts))
        assert preset.size_multiple == size_multiple(arch.transformer, arch.vae)


def test_a_preset_that_restates_a_fact_must_agree_with_its_architecture():
    with pytest.raises(ConfigError, match="model.experts=1 but architecture tiny has 2"):
        _spec("+model.experts=1")
    with pytest.raises(ConfigError, match="model.architecture='nope' is not a registered architecture"):
        _spec("model.architecture=nope")


def test_no_code_looks_a_model_up_by_its_task_or_compares_task_strings():
    """The variant answers; a task string is only its name (models/variants.py)."""
    task_word = re.compile(r"""(\.task\s*(==|!=|\bin\b|\bnot\s+in\b))|((==|!=)\s*["'](t2v|i2v|ti2v)["'])|for_task""")
    found = []
    for path in sorted(Path(PACKAGE).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if task_word.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, found


def test_a_second_text_to_video_architecture_is_planned_with_its_own_dimensions(wide):
    from parallel_wan.memory_plan.architecture import architecture, transformer_shapes
    from parallel_wan.memory_plan.report import plan
    from parallel_wan.memory_plan.weight_bytes import expert_bytes

    spec = _spec("model.architecture=tiny_wide")
    assert spec.model.task == "t2v" and architecture(spec)[0] == wide.transformer
    planned = plan(spec)
    assert planned.expert == expert_bytes(transformer_shapes(wide.transformer), spec.execution.dtype, 1)
    tiny = registry.ARCHITECTURES["tiny"].transformer
    assert planned.expert.whole > expert_bytes(transformer_shapes(tiny), spec.execution.dtype, 1).whole


def test_a_second_text_to_video_architecture_is_fit_checked_with_its_own_dimensions(wide):
    from parallel_wan.memory_plan.fits import check_fits
    from parallel_wan.memory_plan.report import plan

    spec, tiny = _spec("model.architecture=tiny_wide"), _spec()
    budget = plan(spec).peak - 1
    assert plan(tiny).peak < budget
    check_fits(tiny, budget=budget)  # the task's other architecture fits
    with pytest.raises(ConfigError, match="does not fit"):
        check_fits(spec, budget=budget)


def test_a_second_text_to_video_architecture_has_its_kernel_checked_for_its_head_dim(wide, monkeypatch):
    from parallel_wan.backends import process
    from parallel_wan.backends.torch import attention_impl

    asked = []

    def refuse(impl, device, head_dim, dtype):
        asked.append(head_dim)
        return f"attention_impl={impl} refused for head_dim {head_dim}"

    monkeypatch.setattr(attention_impl, "unavailable_reason", refuse)
    with pytest.raises(ConfigError, match="head_dim 64"):
        process.check_device(_spec("model.architecture=tiny_wide", "attention_impl=sdpa"))
    assert asked == [wide.transformer.attention_head_dim]
