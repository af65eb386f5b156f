"""``python -m batchgw.config`` against the local stack (``make config ARGS="…"``): the
stack's endpoint and table names, from the same ports ``make run`` uses."""

from __future__ import annotations

import os
import sys

from batchgw.config.__main__ import main

from local.env import Ports, stack_env

if __name__ == "__main__":
    os.environ.update(stack_env(Ports.from_env()))
    sys.exit(main())
