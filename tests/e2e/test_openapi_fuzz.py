"""schemathesis against the API's own OpenAPI document (``GET /v1/openapi.json``), on a
stack of its own: whatever it sends to any operation, the gateway never answers 5xx.

Two runs, both seeded and bounded, each printing what it tried:

- the schemathesis CLI itself, as the issue ran it (its examples and coverage phases:
  unsupported methods, missing and wrong keys, boundary and wrong-type values of every
  parameter), as an administrator, who reaches every route;
- every operation driven here, positive and negative cases, as an ordinary user on the
  ``/v1`` routes and as an administrator on ``/admin``: once with generated path parameters,
  once following the document's links from real objects (a batch, a file, an upload, a user,
  a key made first), so the fuzzed cases reach stored things. The cases go out from several
  threads at once, as clients do, so races between routes on one object show up too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from schemathesis import GenerationMode

from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, stack_for

pytestmark = pytest.mark.e2e
ALICE = {"Authorization": "Bearer sk-local-alice"}
ADMIN = {"Authorization": "Bearer sk-local-admin"}
SEED = 20261203
EXAMPLES_PER_OPERATION = 8  # per generation mode, per pass
CLI_EXAMPLES = 5  # its coverage phase's cases follow from the document, not from this
THREADS = 6
# Methods no route has: each must be answered (404) by the gateway, never 501 by a server.
UNROUTED_METHODS = ("TRACE", "PROPFIND")


@pytest.fixture(scope="module")
def fuzzed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {
        **STACK_ENV,
        # every example reaches its operation: no per-user or per-key limit answers it 429 first
        "BATCH_MAX_ACTIVE_PER_USER": "100000",
        "BATCH_API_RATE_PER_KEY": "0",
        "BATCH_FILE_UPLOADS_PER_HOUR": "100000",
    }
    with stack_for(tmp_path_factory, "openapi", env) as running:
        yield running


@pytest.fixture(scope="module")
def document(fuzzed_stack: LocalStack) -> dict[str, Any]:
    return dict(httpx.get(f"{fuzzed_stack.api_url}/openapi.json").raise_for_status().json())


def test_the_document_describes_every_route_with_its_parameters(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.")
    listing = document["paths"]["/v1/batches"]["get"]
    assert {p["name"] for p in listing["parameters"]} == {
        "limit",
        "after",
        "status",
        "created_after",
        "created_before",
    }
    assert "requestBody" in document["paths"]["/v1/batches"]["post"]
    assert "requestBody" in document["paths"]["/admin/users/{user_id}"]["patch"]
    preflight = document["paths"]["/v1/batches/preflight"]["post"]
    assert "requestBody" in preflight and [p["name"] for p in preflight["parameters"]] == ["format"]
    assert "get" in document["paths"]["/user/batch-capabilities"]
    assert document["paths"]["/v1/batches/{batch_id}/results"]["get"]["responses"]["400"]
    assert not any(path.startswith("/v1/messages/batches") for path in document["paths"])


def test_the_document_links_each_made_object_to_what_can_be_done_with_it(document: dict[str, Any]) -> None:
    ids = {
        op["operationId"]: (method, path)
        for path, ops in document["paths"].items()
        for method, op in ops.items()
    }
    created = document["paths"]["/v1/batches"]["post"]["responses"]["200"]["links"]
    assert {ids[link["operationId"]] for link in created.values()} == {
        ("get", "/v1/batches/{batch_id}"),
        ("patch", "/v1/batches/{batch_id}"),
        ("post", "/v1/batches/{batch_id}/cancel"),
        ("get", "/v1/batches/{batch_id}/results"),
        ("get", "/v1/batches/{batch_id}/output.jsonl"),
        ("delete", "/v1/batches/{batch_id}"),
        ("post", "/v1/batches/{batch_id}/retry"),
    }
    uploaded = document["paths"]["/v1/files"]["post"]["responses"]["200"]["links"]
    assert {ids[link["operationId"]] for link in uploaded.values()} == {
        ("get", "/v1/files/{file_id}"),
        ("get", "/v1/files/{file_id}/content"),
        ("delete", "/v1/files/{file_id}"),
    }
    for link in created.values():
        assert link["parameters"] == {"batch_id": "$response.body#/id"}


# --- the schemathesis CLI -------------------------------------------------------------------------


def test_the_schemathesis_cli_finds_no_server_error(fuzzed_stack: LocalStack, tmp_path: Path) -> None:
    """As the issue ran it (``not_a_server_error``), seeded and bounded, as an administrator."""
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{fuzzed_stack.api_url}/openapi.json",
        "-H",
        f"Authorization: {ADMIN['Authorization']}",
        "--checks",
        "not_a_server_error",
        "--phases",
        "examples,coverage",  # generated cases: the driver below
        "--max-examples",
        str(CLI_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",  # hypothesis is not thread-safe: the driver below sends concurrently instead
        "--report",
        "ndjson",
        "--report-dir",
        str(tmp_path),
    ]
    run = subprocess.run(  # in tmp_path: its own .schemathesis state stays out of the tree
        command, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path
    )
    statuses, server_errors = _cli_statuses(next(tmp_path.glob("*.ndjson")))
    print(
        f"\n{' '.join(command[1:])}\n  {sum(statuses.values())} cases, "
        f"status codes {dict(sorted(statuses.items()))}"
    )
    assert server_errors == [], server_errors
    assert run.returncode == 0, run.stdout[-4000:]


def _cli_statuses(report: Path) -> tuple[Counter[int], list[str]]:
    """Status codes of every response the CLI's run recorded, and its 5xx (method, URL)."""
    statuses: Counter[int] = Counter()
    errors = []
    for line in report.read_text().splitlines():
        finished = json.loads(line).get("ScenarioFinished")
        for interaction in ((finished or {}).get("recorder") or {}).get("interactions", {}).values():
            response = interaction.get("response")
            if response is not None:
                statuses[response["status_code"]] += 1
                if response["status_code"] >= 500:
                    errors.append(f"{interaction['request']['method']} {interaction['request']['uri']}")
    return statuses, errors


# --- every operation, driven here --------------------------------------------------------------


class Tally:
    """What a run tried: operations, cases, status codes, and each 5xx with how to repeat it."""

    def __init__(self) -> None:
        self.operations: set[str] = set()
        self.cases = 0
        self.statuses: Counter[int] = Counter()
        self.failures: list[str] = []

    def record(self, label: str, status: int, curl: str) -> None:
        self.operations.add(label)
        self.cases += 1
        self.statuses[status] += 1
        if status >= 500:
            self.failures.append(f"{status} {label}: {curl[:600]}")


def _cases(operation: Any, pinned: dict[str, str]) -> list[schemathesis.Case]:
    """EXAMPLES_PER_OPERATION positive and as many negative cases for ``operation``, seeded,
    path parameters in ``pinned`` set to those values."""
    drawn: list[schemathesis.Case] = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            phases=[Phase.generate],  # drawn here, sent later: nothing to shrink
        )
        @seed(SEED)
        def draw(case: schemathesis.Case) -> None:
            if pinned:
                case.path_parameters = {**(case.path_parameters or {}), **pinned}
            drawn.append(case)

        try:
            draw()
        except Exception as exc:  # an operation hypothesis cannot draw for: say so, go on
            print(f"  could not draw {mode.value} cases for {operation.label}: {exc!r}"[:300])
    return drawn


def _send(base_url: str, tally: Tally, jobs: list[tuple[schemathesis.Case, dict[str, str]]]) -> None:
    def one(job: tuple[schemathesis.Case, dict[str, str]]) -> None:
        case, headers = job
        try:
            response = case.call(base_url=base_url, headers=headers, timeout=30)
        except Exception as exc:  # the connection failed: as bad as a 5xx
            tally.record(case.operation.label, 599, f"{exc!r} {case.as_curl_command(headers)}")
            return
        tally.record(case.operation.label, response.status_code, case.as_curl_command(headers))

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, jobs))


def _made(api: str) -> dict[tuple[str, str], Any]:
    """Real objects, made through the operations the document's links start from: what each
    answered (method, path -> body, with its path parameters)."""
    alice, admin = httpx.Client(headers=ALICE, timeout=30), httpx.Client(headers=ADMIN, timeout=30)
    line = {"model": "sim-chat", "messages": [{"role": "user", "content": "fuzz [[sim latency_ms=200]]"}]}
    requests = [{"custom_id": f"z-{i}", "url": "/v1/chat/completions", "body": line} for i in range(3)]
    made: dict[tuple[str, str], Any] = {}
    made["post", "/v1/batches"] = (
        alice.post(f"{api}/batches", json={"requests": requests}).raise_for_status().json()
    )
    file = ("requests.jsonl", json.dumps({"custom_id": "f", "url": "/v1/chat/completions", "body": line}))
    made["post", "/v1/files"] = (
        alice.post(f"{api}/files", files={"file": file}, data={"purpose": "batch"}).raise_for_status().json()
    )
    declared = {"filename": "parts.jsonl", "purpose": "batch", "bytes": 10}
    made["post", "/v1/files/presigned"] = (
        alice.post(f"{api}/files/presigned", json=declared).raise_for_status().json()
    )
    upload = {**declared, "mime_type": "application/jsonl"}
    made["post", "/v1/uploads"] = alice.post(f"{api}/uploads", json=upload).raise_for_status().json()
    admin_api = api.removesuffix("/v1") + "/admin"
    user = {"name": "Fuzzed", "email": "fuzzed@example.com", "role": "internal"}
    made["post", "/admin/users"] = admin.post(f"{admin_api}/users", json=user).raise_for_status().json()
    user_id = made["post", "/admin/users"]["id"]
    made["post", "/admin/users/{user_id}/keys"] = (
        admin.post(f"{admin_api}/users/{user_id}/keys", json={"name": "k"}).raise_for_status().json()
    )
    return made


def _pointer(body: Any, expression: str) -> str:
    """A link's ``$response.body#/a/b`` read from ``body``."""
    value = body
    for part in expression.removeprefix("$response.body#/").split("/"):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return str(value)


def _linked(
    document: dict[str, Any], made: dict[tuple[str, str], Any]
) -> list[tuple[str, str, dict[str, str]]]:
    """Every link of the document whose source was made: (method, path, its parameters)."""
    by_id = {
        op["operationId"]: (method, path)
        for path, ops in document["paths"].items()
        for method, op in ops.items()
    }
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if (method, path) not in made:
                continue
            for link in operation["responses"].get("200", {}).get("links", {}).values():
                target = by_id[link["operationId"]]
                values = {name: _pointer(made[method, path], e) for name, e in link["parameters"].items()}
                found.append((*target, values))
    return found


def test_no_input_to_any_operation_makes_the_gateway_answer_5xx(
    fuzzed_stack: LocalStack, document: dict[str, Any]
) -> None:
    base_url = fuzzed_stack.api_url.removesuffix("/v1")
    schema = schemathesis.openapi.from_dict(document)
    operations = {(op.method.lower(), op.path): op for op in (r.ok() for r in schema.get_all_operations())}

    def headers_for(path: str) -> dict[str, str]:
        return ADMIN if path.startswith("/admin/") else ALICE

    tally = Tally()
    # 1. every operation, its path parameters generated
    jobs = [(case, headers_for(path)) for (_, path), op in operations.items() for case in _cases(op, {})]
    # 2. every link the document draws, from real objects: the fuzzed cases reach stored things
    made = _made(fuzzed_stack.api_url)
    links = _linked(document, made)
    assert len(links) >= 20
    linked = [
        (case, headers_for(path))
        for method, path, values in links
        for case in _cases(operations[method, path], values)
    ]
    # deletes last: the other linked operations find their object first
    linked.sort(key=lambda job: job[0].method.upper() == "DELETE")
    print(f"\ndriven (seed {SEED}): {len(operations)} operations, {len(links)} links followed")
    _send(base_url, tally, jobs)
    _send(base_url, tally, linked)
    # 3. methods no route has, on every path
    with httpx.Client(timeout=30) as client:
        for path in document["paths"]:
            for method in UNROUTED_METHODS:
                url = base_url + path.replace("{", "").replace("}", "")
                answer = client.request(method, url, headers=headers_for(path))
                tally.record(f"{method} {path}", answer.status_code, f"curl -X {method} {url}")
    print(
        f"  {len(tally.operations)} operations tried, {tally.cases} cases, "
        f"status codes {dict(sorted(tally.statuses.items()))}"
    )
    assert len(operations) >= 40
    assert tally.failures == []
    # the links lead to real objects: reading what was made answers 200
    assert tally.statuses[200] > 0
