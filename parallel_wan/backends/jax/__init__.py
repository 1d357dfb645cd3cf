"""The JAX backend: the same models on a ("dp", "ring", "ulysses") device mesh.

ops.py               the `ops` namespace (torch semantics, one `lax.scan` over stacked layers)
attention.py         local attention kernels: splash (TPU), cuDNN (GPU), jnp (CPU); log-sum-exp merge
sequence_parallel.py the mesh, Ulysses × ring attention under `jax.shard_map`, forward on token shards
placement.py         param trees → stacked, cast, replicated or FSDP-sharded device arrays
backend.py           what the orchestrator sees: one controller, global arrays, the parts below
predictor.py         the denoising step as one compiled program per expert (CFG combine inside)
scan_loop.py         scan_loop=true: a range of steps in one `lax.scan`, `lax.cond` on the expert, the
                     sampler's own update on its float32 table
programs.py          jitted programs cached by what their trace depends on
vae_codec.py         VAE decode as a scan over latent frames, split by height; image encode
multihost.py         `jax.distributed.initialize()` when launched on several hosts
compile_log.py       which programs XLA compiled, from JAX's monitoring hook
compile_cache.py     compile_cache=: JAX's persistent cache of compiled programs, on by default
"""

from ...launch.backend_choice import keep_jax_off_libtpu

# Every module of this package imports jax, so this runs before it does (JAX reads JAX_PLATFORMS
# once, at import): on a host where JAX can only use the CPU, JAX is told so and does not load
# libtpu to look for a TPU (libtpu's errors on stderr, its /tmp lock file). A TPU host and a
# user's own JAX_PLATFORMS are left as they are; the AOT compile (aot.py) asks libtpu for a
# topology directly, which works with CPU as JAX's platform (tests/gpu/test_tpu_aot.py runs so).
keep_jax_off_libtpu()
