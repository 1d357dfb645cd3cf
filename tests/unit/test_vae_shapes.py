"""models/vae_shapes.py against diffusers' AutoencoderKLWan built on the meta device: the same
names and shapes, for every VAE of the registry (Wan 2.1's, Wan 2.2's, the tiny ones) and for
configs no checkpoint has (fewer and more resnets, three and five levels, other temporal flags);
and the planner reads it without importing diffusers."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch
from harness.paths import REPO

from parallel_wan.models import registry
from parallel_wan.models.vae_config import VaeConfig
from parallel_wan.models.vae_shapes import param_shapes


def _variants():
    registered = {f"{name}": arch.vae for name, arch in registry.ARCHITECTURES.items()}
    odd = {}
    for base in (VaeConfig.wan2_1(), VaeConfig.wan2_2()):
        wan = "wan2.2" if base.is_residual else "wan2.1"
        for res, mult, temporal in [
            (1, (1, 2, 4, 4), (False, True, True)),
            (3, (1, 2, 2), (True, False)),
            (2, (1, 2, 4, 4), (True, False, True)),
        ]:
            flags = "".join("T" if t else "S" for t in temporal)
            odd[f"{wan}-res{res}-levels{len(mult)}-{flags}"] = dataclasses.replace(
                base,
                base_dim=8,
                decoder_base_dim=12 if base.is_residual else None,
                num_res_blocks=res,
                dim_mult=mult,
                temperal_downsample=temporal,
                scale_factor_temporal=None,
                scale_factor_spatial=None,
            )
    # five levels: only Wan 2.1's layout (diffusers' residual blocks refuse a level that keeps the width)
    odd["wan2.1-levels5"] = dataclasses.replace(
        VaeConfig.wan2_1(),
        base_dim=8,
        dim_mult=(1, 1, 2, 2, 4),
        temperal_downsample=(True, True, False, True),
        scale_factor_temporal=None,
        scale_factor_spatial=None,
    )
    return registered | odd


VARIANTS = _variants()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_table_is_autoencoderklwans_parameters(name):
    from diffusers import AutoencoderKLWan

    cfg = VARIANTS[name]
    with torch.device("meta"):
        module = AutoencoderKLWan(**cfg.to_diffusers())
    want = {n: tuple(p.shape) for n, p in module.named_parameters()}
    got = param_shapes(cfg)
    assert sorted(got) == sorted(want), (sorted(set(got) - set(want))[:5], sorted(set(want) - set(got))[:5])
    assert got == want


def test_the_planner_imports_neither_diffusers_nor_transformers():
    """`python -m parallel_wan.plan` / the doctor size the VAE from the table and the tiny
    vocabulary from `tokenizers` alone: a planning process imports neither library (diffusers'
    autoencoders cost ~4 CPU seconds to import, transformers' tokenizers 1.3)."""
    code = (
        "import sys; from parallel_wan.memory_plan.cli import main; "
        "code = main(['model=tiny', 'mesh=cp2', 'device_memory_gb=8']); "
        "print('imported:', sorted(m for m in ('transformers', 'diffusers') if m in sys.modules)); sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "FITS" in done.stdout and "imported: []" in done.stdout, done.stdout
