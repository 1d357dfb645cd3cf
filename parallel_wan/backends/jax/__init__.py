"""The JAX backend: the same models on a ("dp", "ring", "ulysses") device mesh.

ops.py               the `ops` namespace (torch semantics, one `lax.scan` over stacked layers)
attention.py         local attention kernels: splash (TPU), cuDNN (GPU), jnp (CPU); log-sum-exp merge
sequence_parallel.py the mesh, Ulysses × ring attention under `jax.shard_map`, forward on token shards
placement.py         param trees → stacked, cast, replicated or FSDP-sharded device arrays
"""
