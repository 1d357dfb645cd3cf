"""The contracts between the layers (issue 23): the Backend / NoisePredictor / VideoDecoder
Protocols are complete (a third backend written from them alone runs the real pipeline), code
above backends/ never probes a backend with getattr or branches on its name, settings are
composed in one module, constructing a backend changes no process-wide state, and models/ and
parallel/ import neither torch nor jax."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from parallel_wan.backends.contract import Backend, NoisePredictor, VideoDecoder
from parallel_wan.config.compose import CONF_DIR, compose_settings
from parallel_wan.run import validate_job

PACKAGE = Path(CONF_DIR).parent / "parallel_wan"


def sources(*folders):
    for folder in folders:
        yield from sorted((PACKAGE / folder).rglob("*.py")) if folder else sorted(PACKAGE.glob("*.py"))


def outside_backends():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "backends" not in path.relative_to(PACKAGE).parts:
            yield path


# ------------------------------------------------------------------------------ static rules
BACKEND_NAMES = {"backend", "predict", "predictor", "decoder", "b"}


def test_nothing_above_backends_probes_a_backend_or_predictor_with_getattr():
    found = []
    for path in outside_backends():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr"):
                target = node.args[0]
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
                if name in BACKEND_NAMES:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, found


def test_nothing_above_backends_branches_on_a_backend_objects_name():
    """`backend.name == "jax"` (or the same on spec.execution.backend inside the run path) is a capability
    question the contract answers (single_controller, compiles_ahead, …)."""
    found = []
    for path in outside_backends():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Attribute)
                and node.left.attr == "name"
                and getattr(node.left.value, "id", None) in BACKEND_NAMES
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    found += backend_name_branches(outside_backends())
    assert not found, found


def _names_the_backend(node) -> bool:
    """`backend`, `spec.execution.backend`, `x.backend`: an expression holding a backend's name."""
    return (isinstance(node, ast.Name) and node.id == "backend") or (
        isinstance(node, ast.Attribute) and node.attr == "backend"
    )


def backend_name_branches(paths) -> list[str]:
    """Comparisons of a backend's name with "torch"/"jax" (what capabilities(name) answers)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            named = any(isinstance(o, ast.Constant) and o.value in ("jax", "torch") for o in operands)
            if named and any(_names_the_backend(o) for o in operands):
                where = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path
                found.append(f"{where}:{node.lineno}")
    return found


def test_code_above_backends_asks_capabilities_not_names():
    """Every package above backends/ (config, the planner, jobs, the server, the entry points):
    a backend's name is compared nowhere; `backends.capabilities` answers."""
    assert backend_name_branches(outside_backends()) == []


def test_the_name_check_sees_a_branch(tmp_path):
    code = tmp_path / "x.py"
    code.write_text("def f(spec, backend):\n    return spec.execution.backend == 'jax' or 'torch' != backend\n")
    assert len(backend_name_branches([code])) == 2


def test_hydra_settings_are_composed_in_one_module():
    composing = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if "initialize_config_dir" in text or "hydra.main" in text or "@hydra" in text:
            composing.add(str(path.relative_to(PACKAGE)))
    assert composing == {"config/compose.py"}, composing


@pytest.mark.parametrize("folder", ["models", "parallel"])
def test_models_and_parallel_import_neither_torch_nor_jax(folder):
    for path in sources(folder):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] not in ("torch", "jax", "jaxlib"), f"{path}: imports {name}"


def test_the_backends_subclass_the_contract():
    from parallel_wan.backends.jax.backend import JaxBackend
    from parallel_wan.backends.jax.predictor import JaxNoisePredictor
    from parallel_wan.backends.jax.vae_codec import JaxVideoDecoder
    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.predictor import EagerNoisePredictor
    from parallel_wan.backends.torch.vae_decode import EagerVideoDecoder
    from parallel_wan.memory_plan.meta_backend import MetaBackend

    # explicit subclasses (issubclass() refuses Protocols with data members): the defaults are inherited
    for cls in (TorchBackend, JaxBackend, MetaBackend):
        assert Backend in cls.__mro__, cls
    assert NoisePredictor in EagerNoisePredictor.__mro__ and NoisePredictor in JaxNoisePredictor.__mro__
    assert VideoDecoder in EagerVideoDecoder.__mro__ and VideoDecoder in JaxVideoDecoder.__mro__


def test_constructing_a_backend_changes_no_process_wide_state():
    """Only the world start-up (backends/torch/world.py) sets process state: a TorchBackend —
    the planner's meta backend among them — is an ordinary construction from a device and a mesh."""
    import torch
    import torch.distributed as dist

    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.collectives import NullCollectives
    from parallel_wan.backends.torch.mesh import TorchMesh
    from parallel_wan.memory_plan.meta_backend import MetaBackend
    from parallel_wan.parallel.mesh import MeshSpec

    mesh = MeshSpec(name="cp4", cp=4, ulysses=2, ring=2)
    before = (dist.is_initialized(), torch.get_default_device())
    MetaBackend(mesh)
    TorchBackend(torch.device("cpu"), TorchMesh.build(mesh, NullCollectives(rank=1, world=4)))
    assert (dist.is_initialized(), torch.get_default_device()) == before
    assert not hasattr(__import__("parallel_wan.backends.torch.ops", fromlist=["x"]), "set_default_device")


# ------------------------------------------------------------------------------ a third backend
def _run_on(backend_name, overrides, tmp_path, numpy_backend=None):
    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate

    job, ckpt = validate_job(compose_settings([*overrides, f"output_dir={tmp_path / backend_name}"]), 1)
    backend = numpy_backend or make_backend(job.base)
    return generate(job.base, backend, ckpt)


@pytest.mark.parametrize("model", ["tiny", "tiny_ti2v"])
def test_a_numpy_backend_written_from_the_contract_renders_the_torch_video(model, tmp_path):
    """tests/numpy_backend.py implements the Protocols' required members only (numpy ops, a
    predictor of the whole sequence, a decoder) and runs the real `generate` — load, text, the
    denoising loop with both experts (or TI2V's per-token timesteps), the VAE decode. fp32 on
    both sides: the latents agree to float32 rounding of different kernels (measured 7.8e-6 and
    6.3e-6 relative to the largest latent; allowed 5e-5), the uint8 frames within 1 level."""
    from harness.numpy_backend import NumpyBackend

    overrides = [
        f"model={model}",
        "dtype=float32",
        "steps=4",
        "num_frames=5",
        "height=32",
        "width=32",
        "backend=torch",
        "mesh=single",
        "seed=3",
    ]
    ours = _run_on("numpy", overrides, tmp_path, NumpyBackend())
    ref = _run_on("torch", overrides, tmp_path)
    rel = np.abs(ours.latents - ref.latents).max() / np.abs(ref.latents).max()
    assert rel <= 5e-5, rel
    diff = np.abs(ours.frames.astype(int) - ref.frames.astype(int))
    assert ours.frames.shape == ref.frames.shape and diff.max() <= 1, (diff.max(), rel)
    assert ours.info["steps_per_expert"] == ref.info["steps_per_expert"]
    json.dumps(ours.info)  # the sidecar's record is plain data on this backend too


def backend_attribute_writes(paths) -> list[str]:
    """`backend.X = …` outside a backend's own methods: a backend changed after construction."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Assign, ast.AugAssign)):
                continue
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) in BACKEND_NAMES:
                        where = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path
                        found.append(f"{where}:{node.lineno}")
    return found


def test_construction_decides_a_backend():
    """The constructor decides a backend's ops, its quantized compute and its compiler; nothing in
    the package sets them afterwards (make_backend passes the settings in)."""
    assert backend_attribute_writes(sorted(PACKAGE.rglob("*.py"))) == []
    import torch

    from parallel_wan.backends.torch import fp8_gemm
    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.collectives import NullCollectives
    from parallel_wan.backends.torch.mesh import TorchMesh
    from parallel_wan.parallel.mesh import MeshSpec

    mesh = TorchMesh.build(MeshSpec(), NullCollectives(rank=0, world=1))
    made = TorchBackend(torch.device("cpu"), mesh, quant_compute="auto", compile_backend="aot_eager")
    assert made.quant_compute == fp8_gemm.choose("auto", torch.device("cpu"), compiled=False)
    assert made.ops is fp8_gemm.ops_for(made.quant_compute) and made.compile_backend == "aot_eager"


def test_the_write_check_sees_a_patched_backend(tmp_path):
    code = tmp_path / "x.py"
    code.write_text("def f(backend):\n    backend.ops, backend.quant_compute = 1, 2\n")
    assert len(backend_attribute_writes([code])) == 2
