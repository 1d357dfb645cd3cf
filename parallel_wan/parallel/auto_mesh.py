"""mesh=auto: the mesh a run gets when none is named, from the world size (torch processes or
JAX devices), the model's attention heads, the node size and whether CFG is on.

1. One process (or device): single.
2. CFG parallel (dp = 2) when guidance is on for every expert, the world is even and the
   prompts split (one prompt: its two CFG halves; several: an even count). It halves the
   sequence-parallel group for free — the two halves exchange one prediction per step.
3. The rest is sequence parallelism, cp = world / dp: Ulysses as large as the heads and the
   node allow (all-to-all is cheap inside a node's NVLink/ICI, heads must divide), ring for the
   remaining factor (its hops overlap the attention, so it tolerates the slower links between
   nodes).
"""

from __future__ import annotations

from .mesh import MeshSpec


def auto_mesh(
    world: int, heads: int, cfg_on_every_expert: bool, prompts: int, node_size: int | None = None
) -> MeshSpec:
    if world <= 1:
        return MeshSpec(name="auto:single")
    node = world if node_size is None else max(1, min(node_size, world))
    dp = 2 if cfg_on_every_expert and world % 2 == 0 and (prompts == 1 or prompts % 2 == 0) else 1
    cp = world // dp
    # ulysses is innermost in the rank order (consecutive ranks), so a group of u ≤ node ranks
    # that divides cp never straddles two nodes.
    ulysses = max(u for u in range(1, cp + 1) if cp % u == 0 and heads % u == 0 and u <= node)
    ring = cp // ulysses
    parts = [f"dp{dp}"] if dp > 1 else []
    parts += [f"ulysses{ulysses}"] if ulysses > 1 else []
    parts += [f"ring{ring}"] if ring > 1 else []
    return MeshSpec(name="auto:" + "_".join(parts), dp=dp, cp=cp, ulysses=ulysses, ring=ring)
