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
