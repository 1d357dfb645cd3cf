"""Compile a Triton kernel ahead of time for a CUDA architecture on a machine without a GPU:
Triton lowers to PTX and, with the ptxas its wheel ships, to a cubin; nothing runs."""


def compile_for(fn, types: dict, constants: dict, arch: int, **options):
    """`fn` (a @triton.jit kernel) with `types` for its pointer/float arguments (others i32) and
    `constants` for its constexprs, for sm_`arch` (90 → sm_90a, 100 → sm_100a)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = fn.arg_names
    signature = {n: "constexpr" if n in constants else types.get(n, "i32") for n in names}
    source = ASTSource(fn, signature, constexprs={(names.index(n),): v for n, v in constants.items()})
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def spilled_bytes(kernel, arch: int) -> int:
    """Bytes the kernel spills to local memory (stores + loads), from `ptxas -v` of its PTX
    (Triton's own ptxas): a compiled kernel only knows its spills once loaded on a GPU."""
    import re
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(kernel.asm["ptx"])
        ptx.flush()
        done = subprocess.run(
            [get_ptxas(arch).path, "-v", "--gpu-name", f"sm_{arch}a", ptx.name, "-o", "/dev/null"],
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return sum(int(a) + int(b) for a, b in found)
