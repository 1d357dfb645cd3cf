"""`python -m parallel_wan.serve [key=value ...]`: the run settings every request shares, plus
host=, port=, storage_dir=, max_body_mb= (settings.py)."""

from __future__ import annotations

import importlib.util
import sys

EXTRA = ("fastapi", "uvicorn", "prometheus_client", "multipart")


def main(argv: list[str] | None = None) -> None:
    from ..cli import front
    from ..config import ConfigError
    from ..config.compose import compose_settings
    from ..entry import choose_backend, refuse
    from .settings import split_settings

    words = front("serve", sys.argv[1:] if argv is None else list(argv))
    # The serve extra, looked up (not imported: prometheus_client must first be imported after
    # metrics.py has chosen its mode) before anything starts.
    missing = [name for name in EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        refuse(
            ConfigError(
                f"the server needs the serve extra ({', '.join(missing)} missing): pip install -e "
                '".[serve]" in the parallel_wan checkout (README "Serving")'
            )
        )
    try:
        settings, rest = split_settings(words)
        raw = compose_settings(rest)
        why = choose_backend(raw)
    except ConfigError as exc:
        refuse(exc)
    from .server import serve

    serve(settings, raw, why)


if __name__ == "__main__":
    main()
