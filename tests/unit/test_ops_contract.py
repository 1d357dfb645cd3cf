"""The ops contract (backends/ops_contract.py): every backend's `ops` provides every name with
parameters a caller of the contract can bind, and nothing above backends/ calls an op that is
not in the contract."""

import ast
import inspect
from pathlib import Path

import pytest

from parallel_wan.backends.ops_contract import Ops, ops_names

PACKAGE = Path(__file__).resolve().parents[2] / "parallel_wan"
_DUMMY = object()


def _torch_ops():
    from parallel_wan.backends.torch import ops

    return ops


def _torch_fp8_ops():
    from parallel_wan.backends.torch import fp8_gemm

    return fp8_gemm.ops_for("fp8")


def _jax_ops():
    from parallel_wan.backends.jax import ops

    return ops


def _numpy_ops():
    from tests.harness.numpy_backend import ops

    return ops


BACKENDS = {"torch": _torch_ops, "torch quant_compute=fp8": _torch_fp8_ops, "jax": _jax_ops, "numpy": _numpy_ops}


def _binds(impl, contract) -> str | None:
    """Why a call written against `contract`'s signature would not bind to `impl` (None: it binds).
    Builtins and ufuncs without an inspectable signature are only required to be callable."""
    try:
        have = inspect.signature(impl)
    except (TypeError, ValueError):
        return None
    want = list(inspect.signature(contract).parameters.values())[1:]  # drop self
    required = [p for p in want if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    args = [_DUMMY] * len(required) + ([_DUMMY] if any(p.kind is p.VAR_POSITIONAL for p in want) else [])
    kwargs = {p.name: _DUMMY for p in want if p.default is not p.empty}
    try:
        have.bind(*args, **kwargs)
    except TypeError as exc:
        return f"{have} cannot take {[p.name for p in want]}: {exc}"
    return None


def contract_problems(ops) -> dict[str, str]:
    """{name: what is wrong} for one backend's ops namespace; empty when it meets the contract."""
    problems = {n: "missing" for n in ops_names() if not hasattr(ops, n)}
    if "name" not in problems and not isinstance(ops.name, str):
        problems["name"] = "not a string"
    for name in sorted(ops_names() - {"name"} - set(problems)):
        impl = getattr(ops, name)
        if not callable(impl):
            problems[name] = "not callable"
        elif why := _binds(impl, getattr(Ops, name)):
            problems[name] = why
    return problems


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_backend_provides_every_op(backend):
    assert contract_problems(BACKENDS[backend]()) == {}


def _ops_calls(path: Path) -> set[str]:
    """`ops.NAME` attribute reads in one file."""
    tree = ast.parse(path.read_text())
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ops"
    }


def test_code_above_backends_calls_only_contract_ops():
    names = ops_names()
    stray = {}
    for path in PACKAGE.rglob("*.py"):
        if "backends" in path.relative_to(PACKAGE).parts:
            continue
        extra = _ops_calls(path) - names
        if extra:
            stray[str(path.relative_to(PACKAGE))] = sorted(extra)
    assert not stray, f"ops names outside backends/ops_contract.py: {stray}"


def test_the_check_sees_a_missing_op_and_a_wrong_signature():
    import types

    torch_ops = _torch_ops()
    names = {n: getattr(torch_ops, n) for n in ops_names() if n != "rms_norm"}
    broken = types.SimpleNamespace(**{**names, "pad": lambda x: x})
    problems = contract_problems(broken)
    assert set(problems) == {"rms_norm", "pad"} and problems["rms_norm"] == "missing", problems
