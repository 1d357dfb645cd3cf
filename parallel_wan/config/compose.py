"""The one place Hydra settings are composed: conf/ and command-line overrides → a plain dict,
for every entry point (run, plan, doctor), test and benchmark. Hydra's own errors (an unknown
key or group option, bad override syntax) come back as one-line ConfigErrors naming the fix,
the same for every entry point."""

from __future__ import annotations

import re

from ..conf_dir import conf_dir
from ..errors import ConfigError

CONF_DIR = conf_dir()
# The server's own settings (serve/settings.py takes them out before composing); a run refuses them.
SERVER_ONLY = (
    "host",
    "port",
    "storage_dir",
    "max_body_mb",
    "served_model_names",
    "max_queued",
    "max_batch",
    "batch_wait_s",
    "keep_hours",
    "queue_url",
    "lease_s",
    "lora_dir",
)


def compose_settings(overrides: list[str]) -> dict:
    """conf/config.yaml with `overrides` (key=value …) applied, interpolations resolved."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            cfg = compose(config_name="config", overrides=list(overrides))
        return OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(hydra_error_line(exc, overrides)) from None


def hydra_error_line(exc: Exception, overrides: list[str] = ()) -> str:
    """One line from a Hydra/OmegaConf error, with the fix."""
    text = str(exc)
    if m := re.match(r"Could not override '([^']+)'", text):
        from .checks import _nearest, known_keys

        key = m.group(1)
        if key in SERVER_ONLY:
            return f"{key} is a setting of the server (python -m parallel_wan.serve), not of a run; remove it"
        if "." in key and (line := _not_in_option(key, overrides)):
            return line
        near = _nearest(key, known_keys()) if "." not in key else ""
        return f"{key} is not a setting{near}; remove it (python -m parallel_wan.run --cfg job lists every setting)"
    if m := re.search(r"Could not find '([^'/]+)/([^']+)'", text):
        options = re.findall(r"^\t(\S+)$", text.split("Config search path")[0], flags=re.M)
        return f"{m.group(1)}={m.group(2)} is not known; choose one of: {', '.join(options)}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [
        line
        for line in lines
        if not line.startswith(("See https://", "Config search path", "provider=", "full_key:", "object_type="))
    ]
    return "; ".join(lines) + " (settings are key=value; quote values with spaces: key='a b')"


def _not_in_option(key: str, overrides) -> str | None:
    """`cache.threshold` given with cache=taylorseer: say which options of the group have the
    field and what the chosen one takes (conf/<group>/<option>.yaml), instead of "not a setting"."""
    import os

    import yaml

    group, field = key.split(".", 1)
    folder = os.path.join(CONF_DIR, group)
    if not os.path.isdir(folder) or "." in field:
        return None
    fields = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".yaml"):
            with open(os.path.join(folder, name)) as f:
                fields[name[:-5]] = [k for k in (yaml.safe_load(f) or {}) if k != "defaults"]
    chosen = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == group and "=" in o), None)
    if chosen is None:
        with open(os.path.join(CONF_DIR, "config.yaml")) as f:
            defaults = (yaml.safe_load(f) or {}).get("defaults", [])
        chosen = next((d[group] for d in defaults if isinstance(d, dict) and group in d), None)
    have = [f"{group}={option}" for option, keys in fields.items() if field in keys]
    if chosen not in fields:
        return None
    takes = ", ".join(k for k in fields[chosen] if k != "kind") or "no settings"
    where = f"{' and '.join(have)} {'has' if len(have) == 1 else 'have'} it" if have else f"no {group} option has it"
    return f"{key} is not a setting of {group}={chosen} ({where}; {group}={chosen} takes: {takes}); remove it"


def compose_spec(overrides: list[str], world_size: int = 1, node_size: int | None = None, **settings):
    """`compose_settings` then `resolve`: the validated RunSpec of `overrides` for a world of
    `world_size`. `settings`: values laid over the composed ones (a test's output_dir, …)."""
    from .resolve import resolve

    return resolve({**compose_settings(overrides), **settings}, world_size, node_size)
