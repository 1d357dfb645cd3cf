"""JAX's persistent compilation cache, on by default: the second run of the same programs loads
them from disk instead of compiling (`compile_cache=auto|off|FOLDER`, README "JAX backend").

XLA compiles every program a run needs before the timed phases (the denoising step per expert,
the VAE decode): seconds on a CPU, minutes for A14B on a TPU slice. JAX can keep the compiled
executables in a folder, keyed by the program, the devices, the compile options, the XLA flags and
the jax/jaxlib versions, so a hit is the very executable a compile would have built (the same
bits out). `auto` uses `<cache home>/jax_programs` (the cache home of the built-in models:
$PARALLEL_WAN_CACHE_HOME, else ~/.cache/parallel_wan) unless JAX's own cache is configured
(JAX_COMPILATION_CACHE_DIR or `jax.config`): then theirs is used as they set it.

JAX decides once per process whether to use its cache (at the first compile), so a change here
resets that decision. Compiles for a TPU topology this host does not have (aot.py) bypass the
cache: `bypassed()`.
"""

from __future__ import annotations

import contextlib
import logging
import os

import jax

log = logging.getLogger("parallel_wan")

FOLDER = "jax_programs"
# Programs that compile in less than this are not written: the step and decode programs take
# seconds; JAX's small helpers (a cast, a broadcast) take milliseconds and are cheaper to compile
# than to look up.
MIN_COMPILE_S = 0.1
# The folder is bounded, least recently used entries evicted first (JAX locks it with filelock
# while it evicts, so several processes can share it).
MAX_BYTES = 8 << 30


# The folder the user gave JAX themselves (JAX reads JAX_COMPILATION_CACHE_DIR into its config
# when it is imported), taken before this module changes anything.
_USERS_OWN: str | None = jax.config.jax_compilation_cache_dir or os.environ.get("JAX_COMPILATION_CACHE_DIR") or None


def folder_for(setting: str) -> str | None:
    """The folder `compile_cache=` names (None: off)."""
    if setting == "off":
        return None
    if setting == "auto":
        from ...builtin.stored import cache_home

        return _USERS_OWN or str(cache_home() / FOLDER)
    return setting


def use(setting: str) -> str | None:
    """Point JAX's persistent cache at the folder `setting` names (or turn it off); the folder, or
    None. Called when a JAX backend starts, before it compiles anything."""
    from jax.experimental.compilation_cache import compilation_cache

    folder = folder_for(setting)
    if folder is not None:
        jax.config.update("jax_compilation_cache_dir", folder)
    if folder is not None and folder != _USERS_OWN:  # (the user's own cache keeps the thresholds they set)
        os.makedirs(folder, exist_ok=True)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_S)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    enabled = folder is not None
    if jax.config.jax_enable_compilation_cache != enabled:
        jax.config.update("jax_enable_compilation_cache", enabled)
    compilation_cache.reset_cache()  # JAX decides again at the next compile
    if folder is None:
        log.info("compile_cache=off: every program is compiled")
    else:
        try:  # (JAX's own folder may be a bucket: gs://…)
            kept = f"{sum(1 for name in os.listdir(folder) if name.endswith('-cache'))} programs kept"
        except OSError:
            kept = "JAX's own folder"
        log.info(
            "compile_cache=%s: %s (%s; programs compiled by an earlier run load from there)", setting, folder, kept
        )
    return folder


@contextlib.contextmanager
def bypassed():
    """Compile without the persistent cache (a TPU topology's compile-only devices: their
    executables are never run here, and need not be serialised)."""
    from jax.experimental.compilation_cache import compilation_cache

    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        compilation_cache.reset_cache()
