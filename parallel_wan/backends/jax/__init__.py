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
"""
