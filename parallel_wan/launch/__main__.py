"""`python -m parallel_wan.launch [first-host HOSTLIST]`: what a process started here would see."""

import sys

from ..cli import front
from ..config import ConfigError
from . import main

try:
    sys.exit(main(front("launch", sys.argv[1:])))
except ConfigError as exc:
    print(f"parallel_wan.launch: error: {exc}", file=sys.stderr)
    sys.exit(2)
