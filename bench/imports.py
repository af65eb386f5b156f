"""Cold start: the api handler's import against boto3's alone, side by side in one run.

``import_ratio(env)`` times ``python -c "import boto3"``, ``python -c "import
functions.api.handler"``, the fixed stack's floor and a bare ``python -c pass`` in fresh
interpreters with the same environment, interleaved round by round (so a busy moment of the
machine weighs on all alike), and takes medians. Each import's time is its median minus the
bare interpreter's; ``api_import_ratio`` = handler ÷ boto3 (budget 1.5), recorded also as
``api_import_over_boto3``, the name issue 53 gives it.

The floor is what any api handler on this stack imports before a line of ours: botocore's
session (the handler makes its clients from it, ``storage.aws``, and never imports boto3,
which only S3's managed transfers need), Powertools' HTTP API resolver and Logger, and one
pydantic model (its first model is what
loads pydantic's schema machinery; settings are a pydantic model, STYLE rule 3).
``api_import_floor_ratio`` = floor ÷ boto3: the part of the handler's ratio that is not ours.
``api_import_model_floor_ratio``: the same without the resolver (botocore, Logger, a model).
``api_import_own_over_boto3`` = (handler - floor) ÷ boto3: the handler's own part, what our
modules add to the floor (goal 0.3). The handlers load their modules with garbage collection
off (``batchgw.coldstart``), which any handler could do; so the floor it is measured against
is the fixed stack loaded the same way (``FLOOR_NO_GC``), and the floor as a handler that
leaves collection on loads it is reported beside it (``api_import_floor_gc_on_seconds``).

``first_request(env)`` checks that the import got cheaper rather than moved to the first
request: fresh interpreters that import the handler and then answer one ``GET /v1/batches``
(as ``sk-local-alice``) through it, against a moto that ``env`` names, with the local stack's
resources and seeded keys; interleaved with bare interpreters, median, less the bare one's.
The request really runs: its DynamoDB calls (runtime overrides, the key, the rate, the
list) reach moto over loopback, so moto's answers (a few ms each) are part of the figure,
alike before and after a change. A child whose answer is not 200 fails the run.

``python -m bench.imports [--runs N] [--no-request]`` prints the figures for the local stack's
environment (``local.env.stack_env``; importing the handler reaches no AWS). For the first
request it starts a moto of its own (``local.moto_server``) on a free port and bootstraps it
(``local.bootstrap``): about 10 s more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from batchgw.storage.aws import CALLS_DIR_ENV

from local.adapter import build_event
from local.bootstrap import bootstrap
from local.env import HOST, REPO_ROOT, Ports, free_port, process_env, stack_env, wait_for_port

RATIO_BUDGET = 1.5
OWN_GOAL = 0.3  # of (handler - floor) / boto3

BARE = "pass"
BOTO3 = "import boto3"
HANDLER = "import functions.api.handler"
RESOLVER = "from aws_lambda_powertools.event_handler import APIGatewayHttpResolver"
# The floor without Powertools' resolver: what no api handler with pydantic settings avoids.
MODEL_FLOOR = """
import botocore.session
from aws_lambda_powertools import Logger
from pydantic import BaseModel

class Floor(BaseModel):
    limit: int = 1
"""
FLOOR = RESOLVER + MODEL_FLOOR
# The same floor with garbage collection off while it loads, as our handlers load theirs.
FLOOR_NO_GC = "import gc\ngc.disable()\n" + FLOOR
# A fresh interpreter's first request: the event is argv[1]; exits 3 unless answered 200.
FIRST_REQUEST = """
import sys, json
from types import SimpleNamespace
import functions.api.handler as api
context = SimpleNamespace(
    function_name="batchgw-api",
    memory_limit_in_mb=1024,
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:batchgw-api",
    aws_request_id="bench-first-request",
)
answer = api.handler(json.loads(sys.argv[1]), context)
sys.exit(0 if answer["statusCode"] == 200 else 3)
"""
FIRST_REQUEST_KEY = "sk-local-alice"  # seeded by local.bootstrap
MOTO_START_SECONDS = 60.0
PYCACHE = Path(tempfile.gettempdir()) / "batchgw-bench-pycache"


@dataclass(frozen=True)
class ImportTimes:
    """Medians in seconds: each import's is its interpreter's wall time minus a bare one's."""

    bare_seconds: float
    boto3_seconds: float
    handler_seconds: float
    floor_seconds: float  # the fixed stack's own imports, collection off (FLOOR_NO_GC)
    floor_gc_on_seconds: float  # the same with collection on (FLOOR)
    model_floor_seconds: float  # the same without Powertools' resolver (MODEL_FLOOR)
    runs: int

    @property
    def ratio(self) -> float:
        return self.handler_seconds / self.boto3_seconds

    @property
    def own_ratio(self) -> float:
        """What the handler's own modules add to the floor, in boto3's imports."""
        return (self.handler_seconds - self.floor_seconds) / self.boto3_seconds

    @property
    def floor_ratio(self) -> float:
        return self.floor_seconds / self.boto3_seconds

    @property
    def model_floor_ratio(self) -> float:
        return self.model_floor_seconds / self.boto3_seconds

    def as_dict(self) -> dict[str, float | int]:
        return {
            "api_import_ratio": self.ratio,
            "api_import_over_boto3": self.ratio,
            "api_import_own_over_boto3": self.own_ratio,
            "api_import_seconds": self.handler_seconds,
            "boto3_import_seconds": self.boto3_seconds,
            "api_import_floor_ratio": self.floor_ratio,
            "api_import_floor_seconds": self.floor_seconds,
            "api_import_floor_gc_on_seconds": self.floor_gc_on_seconds,
            "api_import_model_floor_ratio": self.model_floor_ratio,
            "bare_interpreter_seconds": self.bare_seconds,
            "runs": self.runs,
        }


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """A fresh interpreter's environment: the stack's variables, the shared layer on the path,
    no AWS call recording (which would add its own work to the import), and bytecode: the
    layers ship it (``infra.constructs.layers``), as boto3's install has it, so every
    module is imported compiled, kept apart from the tree (``PYTHONPYCACHEPREFIX``; a
    machine that sets PYTHONDONTWRITEBYTECODE would otherwise compile ours on every run)."""
    child = process_env(env)
    paths = [str(REPO_ROOT / "layers" / "shared" / "python"), str(REPO_ROOT)]
    child["PYTHONPATH"] = os.pathsep.join([*paths, child.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    child.pop(CALLS_DIR_ENV, None)
    child.pop("PYTHONDONTWRITEBYTECODE", None)
    child["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return child


def _wall_seconds(code: str, env: Mapping[str, str], *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=REPO_ROOT, capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{code!r} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed


def import_ratio(env: Mapping[str, str], runs: int = 5) -> ImportTimes:
    """Medians of ``runs`` fresh interpreters each: bare, ``import boto3``, the api handler,
    the fixed stack's floor."""
    child = child_env(env)
    samples: dict[str, list[float]] = {
        BARE: [],
        BOTO3: [],
        HANDLER: [],
        FLOOR_NO_GC: [],
        FLOOR: [],
        MODEL_FLOOR: [],
    }
    for code in samples:  # not counted: writes the bytecode the layers ship
        _wall_seconds(code, child)
    for _ in range(runs):
        for code, times in samples.items():
            times.append(_wall_seconds(code, child))
    bare = statistics.median(samples[BARE])
    return ImportTimes(
        bare_seconds=bare,
        boto3_seconds=statistics.median(samples[BOTO3]) - bare,
        handler_seconds=statistics.median(samples[HANDLER]) - bare,
        floor_seconds=statistics.median(samples[FLOOR_NO_GC]) - bare,
        floor_gc_on_seconds=statistics.median(samples[FLOOR]) - bare,
        model_floor_seconds=statistics.median(samples[MODEL_FLOOR]) - bare,
        runs=runs,
    )


def floor_line(times: ImportTimes) -> str:
    """The fixed stack's floor, and the share of the handler's import that is ours."""
    return (
        f"the fixed stack alone (botocore's session, Powertools' resolver and Logger, a pydantic "
        f"model; collection off while it loads, as the handler's) {times.floor_seconds:.3f} s: floor ratio "
        f"{times.floor_ratio:.2f} (with collection on {times.floor_gc_on_seconds:.3f} s); "
        f"the handler's own modules add {times.handler_seconds - times.floor_seconds:.3f} s "
        f"({times.own_ratio:.2f} of boto3, goal {OWN_GOAL}); without the resolver (botocore, Logger, "
        f"a pydantic model) {times.model_floor_seconds:.3f} s: ratio {times.model_floor_ratio:.2f}"
    )


def first_request_event() -> dict[str, object]:
    """``GET /v1/batches`` as the HTTP API hands it to the api function."""
    headers = [("authorization", f"Bearer {FIRST_REQUEST_KEY}"), ("host", f"{HOST}:8080")]
    return build_event(method="GET", target="/v1/batches", headers=headers, body=b"", source_ip=HOST)


def first_request(env: Mapping[str, str], runs: int = 5) -> float:
    """Median seconds of a fresh interpreter importing the api handler and answering one
    ``GET /v1/batches`` through it, less a bare interpreter's. ``env`` names a moto with the
    local stack's resources and seeded keys (``AWS_ENDPOINT_URL``)."""
    child = child_env(env)
    event = json.dumps(first_request_event())
    bare: list[float] = []
    served: list[float] = []
    _wall_seconds(FIRST_REQUEST, child, event)  # not counted: writes the bytecode
    for _ in range(runs):
        bare.append(_wall_seconds(BARE, child))
        served.append(_wall_seconds(FIRST_REQUEST, child, event))
    return statistics.median(served) - statistics.median(bare)


@contextmanager
def bootstrapped_moto(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """A moto of the local stack's own (``local.moto_server``) on a free port, with every
    resource created and the keys seeded: yields ``env`` pointed at it; stops it after."""
    port = free_port()
    stack = {**env, **stack_env(Ports(moto=port))}
    server = subprocess.Popen(
        [sys.executable, "-m", "local.moto_server", "--port", str(port)],
        env=process_env(stack),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if not wait_for_port(port, MOTO_START_SECONDS):
            raise RuntimeError(f"moto did not open port {port} within {MOTO_START_SECONDS:.0f} s")
        stack.update(bootstrap(stack))
        yield stack
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per import (default 5)")
    parser.add_argument("--no-request", action="store_true", help="skip the import + first request figure")
    args = parser.parse_args(argv)
    times = import_ratio(stack_env(Ports()), runs=args.runs)
    verdict = "PASS" if times.ratio <= RATIO_BUDGET else "FAIL"
    print(
        f"api handler import {times.handler_seconds:.3f} s, boto3 {times.boto3_seconds:.3f} s "
        f"(bare interpreter {times.bare_seconds:.3f} s; medians of {times.runs}): "
        f"ratio {times.ratio:.2f} (budget {RATIO_BUDGET}) {verdict}"
    )
    print(f"  {floor_line(times)}")
    if not args.no_request:
        with bootstrapped_moto(stack_env(Ports())) as env:
            seconds = first_request(env, runs=args.runs)
        print(
            f"api handler import + first request (GET /v1/batches on moto) {seconds:.3f} s "
            f"(median of {args.runs}, less a bare interpreter's)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
