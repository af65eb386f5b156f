"""Cold start: the api handler's import against boto3's alone, side by side in one run.

``import_ratio(env)`` times ``python -c "import boto3"``, ``python -c "import
functions.api.handler"`` and a bare ``python -c pass`` in fresh interpreters with the same
environment, interleaved round by round (so a busy moment of the machine weighs on all three
alike), and takes medians. Each import's time is its median minus the bare interpreter's;
``api_import_ratio`` = handler ÷ boto3 (budget 1.5).

``python -m bench.imports [--runs N]`` prints the figures for the local stack's environment
(``local.env.stack_env`` on the default ports: importing the handler reaches no AWS, so no
stack needs to run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from batchgw.storage.aws import CALLS_DIR_ENV

from local.env import REPO_ROOT, Ports, process_env, stack_env

RATIO_BUDGET = 1.5

BARE = "pass"
BOTO3 = "import boto3"
HANDLER = "import functions.api.handler"


@dataclass(frozen=True)
class ImportTimes:
    """Medians in seconds: each import's is its interpreter's wall time minus a bare one's."""

    bare_seconds: float
    boto3_seconds: float
    handler_seconds: float
    runs: int

    @property
    def ratio(self) -> float:
        return self.handler_seconds / self.boto3_seconds

    def as_dict(self) -> dict[str, float | int]:
        return {
            "api_import_ratio": self.ratio,
            "api_import_seconds": self.handler_seconds,
            "boto3_import_seconds": self.boto3_seconds,
            "bare_interpreter_seconds": self.bare_seconds,
            "runs": self.runs,
        }


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """A fresh interpreter's environment: the stack's variables, the shared layer on the path,
    and no AWS call recording (which would add its own work to the import)."""
    child = process_env(env)
    paths = [str(REPO_ROOT / "layers" / "shared" / "python"), str(REPO_ROOT)]
    child["PYTHONPATH"] = os.pathsep.join([*paths, child.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    child.pop(CALLS_DIR_ENV, None)
    return child


def _wall_seconds(code: str, env: Mapping[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, check=True)
    return time.perf_counter() - start


def import_ratio(env: Mapping[str, str], runs: int = 5) -> ImportTimes:
    """Medians of ``runs`` fresh interpreters each: bare, ``import boto3``, the api handler."""
    child = child_env(env)
    samples: dict[str, list[float]] = {BARE: [], BOTO3: [], HANDLER: []}
    for _ in range(runs):
        for code, times in samples.items():
            times.append(_wall_seconds(code, child))
    bare = statistics.median(samples[BARE])
    return ImportTimes(
        bare_seconds=bare,
        boto3_seconds=statistics.median(samples[BOTO3]) - bare,
        handler_seconds=statistics.median(samples[HANDLER]) - bare,
        runs=runs,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per import (default 5)")
    args = parser.parse_args(argv)
    times = import_ratio(stack_env(Ports()), runs=args.runs)
    verdict = "PASS" if times.ratio <= RATIO_BUDGET else "FAIL"
    print(
        f"api handler import {times.handler_seconds:.3f} s, boto3 {times.boto3_seconds:.3f} s "
        f"(bare interpreter {times.bare_seconds:.3f} s; medians of {times.runs}): "
        f"ratio {times.ratio:.2f} (budget {RATIO_BUDGET}) {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
