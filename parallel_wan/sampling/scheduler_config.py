"""Read a diffusers `scheduler/scheduler_config.json` into a `Schedule`, refusing settings we do
not reproduce instead of sampling with a silently different solver.

The Wan 2.2 diffusers checkpoints carry `UniPCMultistepScheduler(prediction_type=
"flow_prediction", use_flow_sigmas=True, flow_shift=...)` with every other entry at its default
(diffusers' `scripts/convert_wan_to_diffusers.py`: flow_shift 3.0 for T2V/I2V-A14B, 5.0 for
TI2V-5B). Note that 3.0 is not the official sampling shift (12.0 T2V, 5.0 I2V), which is why
`schedule_from_scheduler_config` takes the shift as an argument and uses the file's value only
when none is given.
"""

from __future__ import annotations

from typing import Any, Mapping

from .schedules import Schedule, make_schedule

SUPPORTED_CLASS = "UniPCMultistepScheduler"

# What each entry must be for our FlowUniPC (order 2, bh2, data prediction, corrector on every
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

# diffusers' defaults for the entries above, applied to keys a config file leaves out (as
# `UniPCMultistepScheduler.from_config` does).
_CLASS_DEFAULTS: dict[str, Any] = {
    "prediction_type": "epsilon",
    "use_flow_sigmas": False,
    "solver_order": 2,
    "solver_type": "bh2",
    "predict_x0": True,
    "lower_order_final": True,
    "disable_corrector": [],
    "solver_p": None,
    "thresholding": False,
    "use_karras_sigmas": False,
    "use_exponential_sigmas": False,
    "use_beta_sigmas": False,
    "use_dynamic_shifting": False,
    "shift_terminal": None,
    "final_sigmas_type": "zero",
    "flow_shift": 1.0,
    "num_train_timesteps": 1000,
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

_VALUES = {"flow_shift", "num_train_timesteps"}


def check_diffusers_unipc_flags(flags: Mapping[str, Any]) -> None:
    """Raise if any entry of a diffusers UniPC config is one we do not reproduce."""
    keys = {k for k in flags if not k.startswith("_")}
    unknown = sorted(keys - set(_REQUIRED) - _IGNORED - _VALUES)
    if unknown:
        raise ValueError(
            f"scheduler config entries {unknown} are unknown to parallel_wan's UniPC reader "
            f"(written against diffusers 0.42); remove them or extend "
            f"parallel_wan/sampling/scheduler_config.py after checking what they change."
        )
    for key, allowed in _REQUIRED.items():
        if key in flags and not any(_same(flags[key], a) for a in allowed):
            raise ValueError(
                f"scheduler config {key}={flags[key]!r} is not reproduced by parallel_wan's "
                f"FlowUniPC; set {key}={allowed[0]!r} (the Wan 2.2 setting)."
            )


def _same(value: Any, allowed: Any) -> bool:
    # `True == 1` in Python; a config's 1 for a boolean entry (or False for a number) is refused.
    if isinstance(value, bool) or isinstance(allowed, bool):
        return isinstance(value, bool) and isinstance(allowed, bool) and value == allowed
    return value == allowed


def schedule_from_scheduler_config(
    cfg: Mapping[str, Any], steps: int, shift: float | None = None
) -> Schedule:
    """The diffusers schedule a `scheduler_config.json` dict describes, for `steps` steps.

    `shift` overrides the file's `flow_shift` (the Wan 2.2 diffusers files hold 3.0, not the
    official 12.0 / 5.0); without it the file's value is used.
    """
    name = cfg.get("_class_name", SUPPORTED_CLASS)
    if name != SUPPORTED_CLASS:
        raise ValueError(
            f"scheduler config _class_name={name!r} is not supported; parallel_wan reproduces "
            f"{SUPPORTED_CLASS} (flow sigmas) and the official FlowUniPC "
            f"(make_schedule('official', ...)). Point the run at a Wan 2.2 diffusers checkpoint "
            f"or choose the official schedule."
        )
    full = {**_CLASS_DEFAULTS, **cfg}
    check_diffusers_unipc_flags(full)
    if shift is None:
        shift = float(full["flow_shift"])
    return make_schedule("diffusers", steps, shift, int(full["num_train_timesteps"]))
