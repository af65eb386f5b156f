"""Each handler invocation's wall duration, written down for ``make cost`` (``bench.cost``).

When ``BATCHGW_INVOCATIONS_DIR`` is set, the local stand-ins for Lambda's invokers (the api
adapter, the SQS pollers, moto's Lambda hook) append one JSON line per invocation to
``<dir>/invocations.<pid>.jsonl``: ``{"function": ..., "seconds": ..., "at": <epoch seconds at
its end>}``. Unset, nothing is written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

INVOCATIONS_DIR_ENV = "BATCHGW_INVOCATIONS_DIR"


def record_invocation(function_name: str, seconds: float) -> None:
    directory = os.environ.get(INVOCATIONS_DIR_ENV)
    if not directory:
        return
    line = json.dumps({"function": function_name, "seconds": seconds, "at": time.time()})
    with (Path(directory) / f"invocations.{os.getpid()}.jsonl").open("a") as out:
        out.write(line + "\n")  # one short append: lines of concurrent invocations never interleave
