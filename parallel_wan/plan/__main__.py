"""`python -m parallel_wan.plan model=… mesh=… device_memory_gb=80`: the memory plan of a run."""

import sys

from ..memory_plan.cli import main

sys.exit(main(sys.argv[1:]))
