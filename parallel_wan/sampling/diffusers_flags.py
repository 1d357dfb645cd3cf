"""Which diffusers `UniPCMultistepScheduler` settings we reproduce, and the check that refuses
the rest instead of sampling with a silently different solver.

Both `make_schedule(..., **flags)` and the `scheduler_config.json` reader
(scheduler_config.py) call `check_diffusers_unipc_flags`; it lives apart from both so neither
imports the other's module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What each entry must be for our UniPC (order 2, bh2, data prediction, corrector on every
# step, first-order last step, final sigma 0) and diffusers' flow-sigma schedule to be the
# computation diffusers runs.
_REQUIRED: dict[str, tuple[Any, ...]] = {
    "prediction_type": ("flow_prediction",),
    "use_flow_sigmas": (True,),
    "solver_order": (2,),
    # diffusers rewrites the DPM-Solver names to bh2 when it builds the scheduler.
    "solver_type": ("bh2", "midpoint", "heun", "logrho"),
    "predict_x0": (True,),
    # With final sigma 0, lower_order_final=False makes diffusers' last step divide by
    # log-SNR = inf and return inf/nan, so it cannot be a setting anyone samples with.
    "lower_order_final": (True,),
    "disable_corrector": ([],),
    "solver_p": (None,),
    "thresholding": (False,),
    "use_karras_sigmas": (False,),
    "use_exponential_sigmas": (False,),
    "use_beta_sigmas": (False,),
    "use_dynamic_shifting": (False,),
    "shift_terminal": (None, 0, 0.0, False),
    "final_sigmas_type": ("zero",),
}

# Entries the flow-sigma path of diffusers never reads: beta tables, spacing rules that the flow
# branch overwrites, thresholding limits while thresholding is off. Keys starting with "_" are
# diffusers' metadata (class name, version, source path) and are skipped as well.
_IGNORED = {
    "beta_start",
    "beta_end",
    "beta_schedule",
    "trained_betas",
    "rescale_betas_zero_snr",
    "timestep_spacing",
    "steps_offset",
    "dynamic_thresholding_ratio",
    "sample_max_value",
    "sigma_min",
    "sigma_max",
    "time_shift_type",
}

# Entries whose value is used (read by scheduler_config.schedule_from_scheduler_config).
VALUE_ENTRIES = {"flow_shift", "num_train_timesteps"}


def check_diffusers_unipc_flags(flags: Mapping[str, Any]) -> None:
    """Raise if any entry of a diffusers UniPC config is one we do not reproduce."""
    keys = {k for k in flags if not k.startswith("_")}
    unknown = sorted(keys - set(_REQUIRED) - _IGNORED - VALUE_ENTRIES)
    if unknown:
        raise ValueError(
            f"scheduler config entries {unknown} are unknown to parallel_wan's UniPC reader "
            f"(written against diffusers 0.42); remove them or extend "
            f"parallel_wan/sampling/diffusers_flags.py after checking what they change."
        )
    for key, allowed in _REQUIRED.items():
        if key in flags and not any(_same(flags[key], a) for a in allowed):
            raise ValueError(
                f"scheduler config {key}={flags[key]!r} is not reproduced by parallel_wan's "
                f"UniPC; set {key}={allowed[0]!r} (the Wan 2.2 setting)."
            )


def _same(value: Any, allowed: Any) -> bool:
    # `True == 1` in Python; a config's 1 for a boolean entry (or False for a number) is refused.
    if isinstance(value, bool) or isinstance(allowed, bool):
        return isinstance(value, bool) and isinstance(allowed, bool) and value == allowed
    return value == allowed
