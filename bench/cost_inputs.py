"""What the cost model reads besides the AWS calls it recorded (``bench.cost``): the deployed
configuration (each function's memory, from the CDK construct; the workflow's transitions,
from its ASL), and what the local stack's processes wrote (their log bytes, their
invocations and how long each ran).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local.env import REPO_ROOT

# Lambda writes START, END and REPORT lines for every invocation (REPORT with X-Ray's fields).
PLATFORM_LOG_BYTES_PER_INVOCATION = 420
FUNCTIONS_SOURCE = REPO_ROOT / "infra" / "constructs" / "functions.py"
ASL_PATH = REPO_ROOT / "infra" / "workflow" / "batch.asl.json"
# The log files (``<log_dir>/<child>.log``) of the processes that run each function.
LOG_FILES = {"api": "api-*.log", "worker": "worker-*.log", "lifecycle": "moto.log"}


def function_memory_mb(source: Path = FUNCTIONS_SOURCE) -> dict[str, int]:
    """Each function's configured memory, by its folder name (``self._function("Api", "api",
    ..., memory_size=1024)`` in the CDK construct), read without importing CDK."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(source.read_text())):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "_function"):
            continue
        folder = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
        memory = next((k.value for k in node.keywords if k.arg == "memory_size"), None)
        if isinstance(folder, str) and isinstance(memory, ast.Constant) and isinstance(memory.value, int):
            out[folder] = memory.value
    return out


def remaining_transitions(asl: Mapping[str, Any], state: str) -> int:
    """States still to be entered after ``state`` along the success path (``Next``, a Choice's
    ``Default``), up to a Succeed or Fail state."""
    states = asl["States"]
    count, current = 0, state
    while True:
        spec = states[current]
        following = spec.get("Next") or spec.get("Default")
        if following is None or spec.get("End"):
            return count
        count += 1
        current = following


def log_bytes(log_dir: Path) -> dict[str, int]:
    """The bytes of the JSON lines in each function's log files so far."""
    return {function: sum(map(_json_bytes, log_dir.glob(pattern))) for function, pattern in LOG_FILES.items()}


def _json_bytes(path: Path) -> int:
    with path.open("rb") as lines:
        return sum(len(line) for line in lines if line.startswith(b"{"))


@dataclass(frozen=True)
class Invocation:
    function: str  # api, worker, lifecycle, webhooks, admin
    seconds: float
    at: float


def read_invocations(directory: Path) -> list[Invocation]:
    out = []
    for path in directory.glob("invocations.*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            name = str(record["function"]).rpartition("-")[2]
            out.append(Invocation(name, float(record["seconds"]), float(record["at"])))
    return out
