"""The names of a Wan 2.2 model's transformer experts, one home for every layer that names them
(the loader's layouts, the step plan, the caches, sidecars, the settings that pick one): A14B
models have a high-noise expert (the early, noisy steps) and a low-noise expert; TI2V-5B has one.

Each expert has a role in the settings — `lora_high=`, `weights_high=` name the high-noise
expert's files, `lora=`, `weights=` the one expert of a one-expert model (role "all": `lora=`
also applies to both experts of a pair) — and a folder in each checkpoint layout."""

HIGH, LOW, SINGLE = "high_noise", "low_noise", "single"
TWO_EXPERTS = (HIGH, LOW)
ONE_EXPERT = (SINGLE,)

# expert → its role in the settings, and back
ROLE = {HIGH: "high", LOW: "low", SINGLE: "all"}
EXPERT_OF_ROLE = {role: expert for expert, role in ROLE.items()}
_SUFFIX = {"all": "", "high": "_high", "low": "_low"}  # a setting's name: its family + the role's suffix

# the checkpoint layouts' folders of a pair's experts (a one-expert model's is the root / `transformer`)
OFFICIAL_FOLDERS = {HIGH: "high_noise_model", LOW: "low_noise_model"}
DIFFUSERS_FOLDERS = {HIGH: "transformer", LOW: "transformer_2"}


def setting_roles(family: str) -> dict[str, str]:
    """A family's settings → the role of the expert each names, in the order they are checked:
    `setting_roles("weights")` = {"weights": "all", "weights_high": "high", "weights_low": "low"}."""
    return {family + suffix: role for role, suffix in _SUFFIX.items()}


def setting_of(family: str, expert: str) -> str:
    """The setting of `family` that names `expert`'s file: ("weights", HIGH) → "weights_high"."""
    return family + _SUFFIX[ROLE[expert]]
