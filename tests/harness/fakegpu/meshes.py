"""The mesh presets of conf/mesh/ as degrees (the fake-GPU tests run each on its world of fake GPUs)."""

import os

from harness.paths import REPO

CONF = os.path.join(REPO, "conf")


def mesh_degrees(mesh: str) -> dict:
    import yaml

    if mesh == "auto":  # no degrees of its own: on 4 GPUs the rule picks dp2 × ulysses2 for the tiny model
        from parallel_wan.parallel.auto_mesh import auto_mesh

        picked = auto_mesh(4, heads=8, cfg_on_every_expert=True, prompts=1)
        return {"dp": picked.dp, "cp": picked.cp}

    with open(os.path.join(CONF, "mesh", f"{mesh}.yaml")) as f:
        return yaml.safe_load(f)
