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

from collections.abc import Mapping
from typing import Any

from .diffusers_flags import check_diffusers_unipc_flags
from .schedules import Schedule, make_schedule

SUPPORTED_CLASS = "UniPCMultistepScheduler"

# diffusers' defaults for the entries diffusers_flags.py checks, applied to keys a config file
# leaves out (as `UniPCMultistepScheduler.from_config` does).
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


def schedule_from_scheduler_config(cfg: Mapping[str, Any], steps: int, shift: float | None = None) -> Schedule:
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
