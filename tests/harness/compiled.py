"""compile=true against eager on one generation: the block function compiled with the
"aot_eager" capture (inductor's C++ build is a minute here), the rest eager."""

import numpy as np


def compiled_against_eager(words: list, out) -> tuple[float, int]:
    """(the relative difference of the fp32 latents, graphs the compiled run captured) of a run
    of `words` eagerly and with compile=true."""
    import torch._dynamo.utils as dynamo_utils

    from parallel_wan.backends import make_backend
    from parallel_wan.config.compose import compose_spec
    from parallel_wan.pipeline import generate, preflight

    latents = []
    for extra, compile_backend in (([], "inductor"), (["compile=true"], "aot_eager")):
        spec = compose_spec(words + extra, output_dir=str(out))
        before = dynamo_utils.counters["stats"]["unique_graphs"]
        latents.append(generate(spec, make_backend(spec, compile_backend=compile_backend), preflight(spec)).latents)
        compiled = dynamo_utils.counters["stats"]["unique_graphs"] - before
    return float(np.linalg.norm(latents[1] - latents[0]) / np.linalg.norm(latents[0])), compiled
