"""The attention-kernel registry (parallel_wan/backends/torch/kernels/): every kernel one file,
everything else derived from the records — and the same choices as before the registry.

Before issue 39 the choice lived in attention.py (`KERNELS`, `IMPL_KERNELS`, `_candidates`,
`_impl_candidates`), attention_impl.py and sage_attention.py (`unavailable_reason`). Their
decisions are frozen below (`candidates_before`, `reason_before`: the same code, on names
instead of torch objects; `BEFORE_SHA256` is their answers over `CASES` as the pre-registry code
gave them, captured from it at b83aad5) and the registry must give the same answers on every
case a run can reach."""

import hashlib
import itertools
import json
import pathlib
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch
from harness.settings import assert_refused, spec_for

from parallel_wan.backends.torch import attention_choice, kernels
from parallel_wan.backends.torch.attention import KernelChoice, attention_with_lse
from parallel_wan.backends.torch.attention_choice import Device, candidates
from parallel_wan.backends.torch.attention_impl import refusal, unavailable_reason
from parallel_wan.backends.torch.attention_table import auto_table, kernel_table, rewrite
from parallel_wan.backends.torch.kernels import HeadDims, Kernel
from parallel_wan.config import attention_impls
from parallel_wan.doctor import kernel_verdict


# ------------------------------------------------------------------ the choices before the registry
@dataclass(frozen=True)
class Case:
    kind: str
    cap: tuple | None
    dtype: str
    head_dim: int
    setting: str
    fa2: bool = False  # flash_attn imports
    fa3: bool = False  # flash_attn_interface imports
    sage: bool = False  # sageattention and triton are installed
    interp: bool = False  # TRITON_INTERPRET=1
    preferred: str | None = None


DEVICES = [("cpu", None), ("meta", None)] + [
    ("cuda", c) for c in [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]
]
DTYPES = ["float16", "bfloat16", "float32", "float64"]
HEAD_DIMS = [8, 16, 32, 64, 96, 100, 128, 256, 264, 512]
FLAGS = [(a, b) for a in (False, True) for b in (False, True)]


def _cases():
    for (kind, cap), dtype, head_dim in itertools.product(DEVICES, DTYPES, HEAD_DIMS):
        at = dict(kind=kind, cap=cap, dtype=dtype, head_dim=head_dim)
        for (fa2, fa3), preferred in itertools.product(FLAGS, [None, "math", "sage", "cuda_cudnn", "flash_attn3"]):
            yield Case(**at, setting="auto", fa2=fa2, fa3=fa3, preferred=preferred)
        yield Case(**at, setting="sdpa")
        yield from (Case(**at, setting="flash", fa2=fa2, fa3=fa3) for fa2, fa3 in FLAGS)
        yield Case(**at, setting="cudnn")
        yield from (Case(**at, setting="sage", sage=sage, interp=interp) for sage, interp in FLAGS)


CASES = list(_cases())
BEFORE_SHA256 = "dd152ed6fb51d83675cc844f74751653213730454c5982e8b5747b20df750d14"

HALF = ("float16", "bfloat16")
KERNELS_BEFORE = (
    "cpu_flash",
    "flash_attn3",
    "flash_attn",
    "cuda_flash",
    "cuda_cudnn",
    "cuda_efficient",
    "math",
    "sage",
)
IMPL_KERNELS_BEFORE = {
    "sdpa": ("cuda_flash", "cuda_efficient", "cpu_flash", "math"),
    "flash": ("flash_attn3", "flash_attn"),
    "cudnn": ("cuda_cudnn",),
    "sage": ("sage",),
}


def candidates_before(c: Case) -> list[str]:
    """attention.py's `_candidates` / `_impl_candidates` before the registry."""

    def with_preferred(names):
        return names if c.preferred is None else [c.preferred] + [n for n in names if n != c.preferred]

    if c.setting != "auto":
        if c.kind == "cuda":
            skip = {"cpu_flash", "math"} | (set() if c.fa3 and c.cap[0] == 9 else {"flash_attn3"})
        else:
            skip = {n for n in KERNELS_BEFORE if n.startswith("cuda_")} | {"flash_attn3"}
        return [n for n in IMPL_KERNELS_BEFORE[c.setting] if n not in skip]
    if c.kind == "cpu":
        return with_preferred(["cpu_flash", "math"] if c.dtype in ("float32", "float64", *HALF) else ["math"])
    if c.kind != "cuda":
        return ["math"]
    names = []
    if c.dtype in HALF and c.head_dim % 8 == 0 and c.head_dim <= 256:
        major = c.cap[0]
        if major == 9 and c.fa3:
            names.append("flash_attn3")
        if major >= 9:
            names.append("cuda_cudnn")
        if c.fa2:
            names.append("flash_attn")
        names.append("cuda_flash")
        if major < 9:
            names.append("cuda_cudnn")
    if c.dtype in ("float32", *HALF):
        names.append("cuda_efficient")
    return with_preferred(names + ["math"])


def reason_before(c: Case) -> str | None:
    """attention_impl.py's `unavailable_reason` (and sage_attention.py's copy) before the registry."""
    impl, d, fix = c.setting, c.head_dim, "use attention_impl=auto"
    if impl in ("auto", "sdpa"):
        return None
    if impl == "sage":
        if not c.sage:
            return (
                "attention_impl=sage needs SageAttention: pip install 'parallel_wan[sage]' (sageattention==1.0.6), "
                f"or {fix}"
            )
        if c.kind == "cpu":
            if c.interp:
                ok = d >= 16 and d & (d - 1) == 0
                return (
                    None
                    if ok
                    else f"attention_impl=sage under the Triton interpreter needs a power-of-two head_dim ≥ 16, not {d}"
                )
            return f"attention_impl=sage runs on CUDA GPUs (Triton kernels); {fix} on CPU"
    if c.kind != "cuda":
        return f"attention_impl={impl} runs on CUDA GPUs, not {c.kind}; {fix}"
    major, minor = c.cap
    wrong_dtype = f"attention_impl={impl} runs dtype=bfloat16 or float16, not {c.dtype}; set dtype=bfloat16 or {fix}"
    if impl == "sage":
        if major < 8:
            return (
                f"attention_impl=sage needs an sm_80 or newer GPU (int8 tensor cores), this is sm_{major}{minor}; {fix}"
            )
        if d not in (64, 128):
            return f"attention_impl=sage runs head_dim 64 or 128, this model has {d}; {fix}"
        return wrong_dtype if c.dtype not in HALF else None
    if c.dtype not in HALF:
        return wrong_dtype
    too_old = f"attention_impl={impl} needs an sm_80 or newer GPU, this is sm_{major}{minor}; {fix}"
    if impl == "cudnn" and major < 8:
        return too_old
    if impl == "flash":
        if not (c.fa2 or major == 9 and c.fa3):
            return (
                "attention_impl=flash needs flash-attn (3 on Hopper, or 2): pip install flash-attn "
                f"--no-build-isolation, or {fix}"
            )
        if major < 8:
            return too_old
    if d % 8 or d > 256:
        return f"attention_impl={impl} runs head_dim ≤ 256 in multiples of 8, this model has {d}; {fix}"
    return None


def test_the_frozen_choices_are_the_code_before_the_registry():
    answers = [[candidates_before(c), reason_before(c)] for c in CASES]
    assert hashlib.sha256(json.dumps(answers, ensure_ascii=False).encode()).hexdigest() == BEFORE_SHA256


PACKAGES = {"flash_attn": "fa2", "flash_attn_interface": "fa3", "sageattention": "sage", "triton": "sage"}


def test_every_device_dtype_and_head_dim_gets_the_kernels_it_got_before(monkeypatch):
    case = {}
    monkeypatch.setattr(
        attention_choice, "installed", lambda k: all(getattr(case["now"], PACKAGES[p]) for p in k.packages)
    )

    def runnable(names):  # a kernel whose package is missing is never chosen
        return [n for n in names if attention_choice.installed(kernels.kernel(n))]

    wrong = []
    for c in CASES:
        case["now"] = c
        device = Device(c.kind, c.cap, c.interp)
        got = candidates(c.setting, device, c.dtype, c.head_dim, c.preferred)
        before = candidates_before(c)
        reachable = c.kind in ("cpu", "cuda")  # pick_device makes no other device
        if c.setting == "auto":
            same = got == before
        else:  # a named setting runs only once its refusal (below) passed
            same = not (reachable and reason_before(c) is None) or runnable(got) == runnable(before)
        if reachable and c.dtype in ("bfloat16", "float32"):  # a run's dtypes (config's DTYPES)
            same = same and refusal(c.setting, device, c.dtype, c.head_dim) == reason_before(c)
        if not same:
            wrong.append(c)
    assert not wrong, f"{len(wrong)} cases differ, e.g. {wrong[:3]}"


# ------------------------------------------------------------------ the registry holds
def test_every_kernel_is_one_file_with_a_complete_record():
    folder = pathlib.Path(kernels.__file__).parent
    files = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    assert files == sorted(kernels.names())  # one file per kernel, named as its kernel
    generations = {"cpu", "other", *kernels.GENERATIONS}
    for k in kernels.kernels():
        assert k.returns_lse and k.summary and k.priority and set(k.priority) <= generations, k.name
        assert len({x.listed for x in kernels.of_setting(k.setting)}) == 1, k.setting  # one place in the list
        assert sorted(k.checks) == sorted(kernels.CHECKS), k.name
        assert bool(k.packages) == bool(k.install) == bool(k.package_label), k.name
        if k.op is not None:  # the torch op it launches exists (the fake-GPU tests watch for it)
            assert hasattr(torch.ops.aten, k.op.removeprefix("aten.")), k.op
    assert all(not k.exact for k in kernels.of_setting("sage"))  # lossy: never auto's


def test_the_registry_and_the_settings_list_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from parallel_wan.config import attention_impls\n"
        "from parallel_wan.backends.torch import kernels, attention_impl, attention_table\n"
        "assert len(kernels.kernels()) == 9\n"
        "print(','.join(attention_impls()))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "auto,sdpa,flash,cudnn,sage,fp8,xfuser,ours"


def _formula(q, k, v, scale):
    return kernels.kernel("math").run(q, k, v, scale)


TEST_KERNEL = Kernel(
    name="test_formula",
    setting="testing",
    run=_formula,
    summary="a test's own kernel",
    priority={"cpu": 5, "hopper": 15},
    dtypes=("bfloat16",),
    head_dims=HeadDims(multiple_of=16),
    slow="a test's formula",
    listed=50,
)


@pytest.fixture
def test_kernel():
    kernels.register(TEST_KERNEL)
    yield TEST_KERNEL
    kernels.unregister(TEST_KERNEL.name)


def test_a_new_kernel_is_one_registration(test_kernel, monkeypatch):
    """Registered from here alone: auto's order, the refusals, the doctor's verdict, the settings
    list and README's table all have it."""
    monkeypatch.setattr(attention_choice, "installed", lambda k: not k.packages)
    hopper = Device("cuda", (9, 0))
    assert candidates("auto", hopper, "bfloat16", 128) == [
        "test_formula",
        "cuda_cudnn",
        "cuda_flash",
        "cuda_efficient",
        "math",
    ]
    assert candidates("auto", hopper, "bfloat16", 120)[0] == "cuda_cudnn"  # not a multiple of 16
    assert candidates("auto", Device("cpu"), "bfloat16", 64) == ["test_formula", "cpu_flash", "math"]
    assert candidates("testing", hopper, "bfloat16", 128) == ["test_formula"]
    # the refusals, in the words every kernel's get
    assert refusal("testing", hopper, "bfloat16", 128) is None
    assert refusal("testing", hopper, "float32", 128) == (
        "attention_impl=testing runs dtype=bfloat16, not float32; set dtype=bfloat16 or use attention_impl=auto"
    )
    assert refusal("testing", hopper, "bfloat16", 100) == (
        "attention_impl=testing runs head_dim multiples of 16, this model has 100; use attention_impl=auto"
    )
    assert unavailable_reason("testing", torch.device("cpu"), 64, torch.bfloat16) == (
        "attention_impl=testing runs on CUDA GPUs, not cpu; use attention_impl=auto"
    )
    # the doctor's verdict: a slow fallback, in its own words
    assert kernel_verdict("test_formula", (9, 0), "bfloat16") == (
        "test_formula on sm_90: a test's formula, a slow fallback — the fast kernels refused "
        "(check the log above, cuDNN ≥ 9, or install flash-attn)",
        True,
    )
    # the settings list config validates against, and a run's settings
    assert attention_impls() == ("auto", "sdpa", "flash", "cudnn", "sage", "fp8", "testing", "xfuser", "ours")
    assert spec_for("attention_impl=testing").execution.attention_impl == "testing"
    assert_refused(["attention_impl=flashy"], ["auto, sdpa, flash, cudnn, sage, fp8, testing, xfuser, ours"])
    assert "| `test_formula` | testing | a test's own kernel | CPU, Hopper |" in kernel_table()
    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    rewritten = rewrite(readme)  # README's tables, as the command that rewrites them would
    assert kernel_table() in rewritten and auto_table() in rewritten
    assert len(rewritten.splitlines()) == len(readme.splitlines()) + 1  # the kernel's row, nothing else
    assert "| Hopper (sm_90) | `flash_attn3` (when flash-attn 3 is installed), `test_formula`, `cuda_cudnn`" in (
        auto_table()
    )
    # and a backend's choice runs it
    choice = KernelChoice()
    q = torch.randn(1, 5, 2, 16, dtype=torch.bfloat16)
    out, lse = choice(q, q, q)
    assert choice.chosen() == {("cpu", torch.bfloat16, 16): "test_formula"}
    assert torch.equal(out, attention_with_lse(q, q, q, kernel="math")[0])


def test_a_kernel_without_an_lse_is_refused():
    with pytest.raises(ValueError, match="no log-sum-exp"):
        kernels.register(Kernel("no_lse", "testing", _formula, "no lse", {"cpu": 1}, returns_lse=False))
    assert "no_lse" not in kernels.names()


# ------------------------------------------------------------------ the choice is the backend's
def test_each_kernel_choice_keeps_its_own():
    q = torch.randn(1, 6, 2, 16)
    sdpa, auto = KernelChoice("sdpa"), KernelChoice()
    sdpa(q, q, q)
    assert sdpa.chosen() == {("cpu", torch.float32, 16): "cpu_flash"} and auto.chosen() == {}
    auto.prefer("math")
    auto(q, q, q)
    assert auto.chosen() == {("cpu", torch.float32, 16): "math"}
    with pytest.raises(ValueError, match="attention kernel 'nope' is unknown; choose from cpu_flash"):
        auto.prefer("nope")
    with pytest.raises(ValueError, match="names no attention kernel"):
        KernelChoice("xfuser")


def test_the_sidecar_reads_the_kernel_from_its_backend():
    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.collectives import NullCollectives
    from parallel_wan.backends.torch.mesh import TorchMesh
    from parallel_wan.parallel.mesh import MeshSpec

    def backend(impl, **kw):
        mesh = MeshSpec("cp2", cp=2, ulysses=2, ring=1)
        return TorchBackend("cpu", TorchMesh.build(mesh, NullCollectives(rank=0, world=2)), impl, **kw)

    ran, idle = backend("sdpa"), backend("sdpa")
    ran.kernel_choice(*(torch.randn(1, 8, 2, 16),) * 3)
    assert ran.attention_kernel("float32", 16) == "cpu_flash"
    assert idle.attention_kernel("float32", 16) == "torch_sdpa"  # nothing chosen there
    assert backend("auto", sequence_parallel="xfuser").attention_kernel("float32", 16) == "xfuser"


# ------------------------------------------------------------------ sequence_parallel
def test_sequence_parallel_is_its_own_setting_and_xfuser_its_old_name(monkeypatch):
    from parallel_wan.config import attention
    from parallel_wan.jobs.keys import result_settings, state_settings

    default = spec_for()
    assert default.execution.sequence_parallel == "ours"
    assert "sequence_parallel" not in default.to_dict()  # a default run's settings are as they were
    notes = []
    monkeypatch.setattr(attention.log, "info", notes.append)
    attention._note_old_name.cache_clear()  # the note is said once per process
    new, old = spec_for("sequence_parallel=xfuser"), spec_for("attention_impl=xfuser")
    assert notes == ["attention_impl=xfuser is now sequence_parallel=xfuser (attention_impl=auto); set that instead"]
    for spec in (new, old):
        assert (spec.execution.attention_impl, spec.execution.sequence_parallel) == ("auto", "xfuser")
        assert spec.to_dict()["sequence_parallel"] == "xfuser"  # the sidecar's "config"
        # hashed as attention_impl=xfuser was: names and saved states made before still match
        assert state_settings(spec, 1)["attention_impl"] == "xfuser" and "sequence_parallel" not in state_settings(
            spec, 1
        )
        assert result_settings(spec) == result_settings(default)
    assert new.execution.sequence_parallel_set_by == "sequence_parallel"
    assert old.execution.sequence_parallel_set_by == "attention_impl"


def test_sequence_parallel_refusals():
    assert_refused(["sequence_parallel=yours"], ["sequence_parallel='yours'", "ours, xfuser"])
    assert_refused(
        ["sequence_parallel=xfuser", "attention_impl=sdpa"], ["attention_impl=sdpa", "sequence_parallel=ours"]
    )
    assert_refused(["sequence_parallel=xfuser", "backend.name=jax"], ["sequence_parallel=xfuser", "backend=jax"])
    # the old spelling keeps its old refusals, word for word
    assert_refused(
        ["attention_impl=xfuser", "backend.name=jax"],
        [
            "attention_impl=xfuser is a PyTorch (CUDA) kernel but backend=jax; use attention_impl=auto "
            "(JAX picks its own attention)"
        ],
    )


def test_xfuser_refusals_name_the_setting_that_chose_it(monkeypatch):
    from parallel_wan.backends.torch.xfuser_attention import xfuser_unavailable_reason

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert xfuser_unavailable_reason("attention_impl") == (
        "attention_impl=xfuser needs CUDA GPUs (xfuser does not run on CPU); use attention_impl=auto"
    )
    assert xfuser_unavailable_reason() == (
        "sequence_parallel=xfuser needs CUDA GPUs (xfuser does not run on CPU); use sequence_parallel=ours"
    )


def test_fp8_is_refused_where_e4m3_tensor_cores_or_its_tile_shapes_are_missing(monkeypatch):
    """attention_impl=fp8 (after the frozen table: it came later) runs on sm_89+ at head_dim 64/128
    in bf16/fp16, and on CPU only under Triton's interpreter; each refusal names the fix."""
    monkeypatch.setattr(attention_choice, "installed", lambda k: True)
    fix = "use attention_impl=auto"
    expected = {
        (Device("cuda", (8, 9)), "bfloat16", 128): None,  # L40S, RTX 40
        (Device("cuda", (9, 0)), "bfloat16", 64): None,
        (Device("cuda", (10, 0)), "bfloat16", 128): None,
        (Device("cpu", None, True), "float32", 16): None,  # the tests' interpreter: any dtype
        (Device("cuda", (8, 0)), "bfloat16", 128): (
            f"attention_impl=fp8 needs an sm_89 or newer GPU (FP8 tensor cores), this is sm_80; {fix}"
        ),
        (
            Device("cuda", (9, 0)),
            "bfloat16",
            96,
        ): f"attention_impl=fp8 runs head_dim 64 or 128, this model has 96; {fix}",
        (Device("cuda", (9, 0)), "float32", 128): (
            f"attention_impl=fp8 runs dtype=bfloat16 or float16, not float32; set dtype=bfloat16 or {fix}"
        ),
        (Device("cpu", None), "bfloat16", 128): f"attention_impl=fp8 runs on CUDA GPUs (Triton kernels); {fix} on CPU",
    }
    got = {key: refusal("fp8", *key) for key in expected}
    assert got == expected
    assert not kernels.kernel("fp8").exact and "fp8" not in candidates("auto", Device("cuda", (9, 0)), "bfloat16", 128)
