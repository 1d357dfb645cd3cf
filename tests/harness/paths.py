"""Where things are: the repository (the checkout whose parallel_wan is imported) and its parts."""

import os

from parallel_wan.config.compose import CONF_DIR

REPO = os.path.dirname(CONF_DIR)
PACKAGE = os.path.join(REPO, "parallel_wan")
ENV = {**os.environ, "PYTHONPATH": REPO}  # a subprocess imports this checkout's parallel_wan
