"""schemathesis against the API's own OpenAPI document (``GET /v1/openapi.json``), on a
stack of its own: whatever it sends to any operation, the gateway never answers 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, stack_for

pytestmark = pytest.mark.e2e
KEY = {"Authorization": "Bearer sk-local-alice"}
EXAMPLES_PER_OPERATION = 40


@pytest.fixture(scope="module")
def fuzzed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with stack_for(
        tmp_path_factory,
        "openapi",
        # every example reaches its operation: no per-key rate answers it 429 first
        {**STACK_ENV, "BATCH_MAX_ACTIVE_PER_USER": "100000", "BATCH_API_RATE_PER_KEY": "0"},
    ) as running:
        yield running


def test_the_document_describes_every_route_with_its_parameters(fuzzed_stack: LocalStack) -> None:
    document = httpx.get(f"{fuzzed_stack.api_url}/openapi.json").raise_for_status().json()
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
    assert document["paths"]["/v1/batches/{batch_id}/results"]["get"]["responses"]["400"]
    assert not any(path.startswith("/v1/messages/batches") for path in document["paths"])


def test_no_input_to_any_operation_makes_the_gateway_answer_5xx(fuzzed_stack: LocalStack) -> None:
    document = httpx.get(f"{fuzzed_stack.api_url}/openapi.json").raise_for_status().json()
    base_url = fuzzed_stack.api_url.removesuffix("/v1")
    schema = schemathesis.openapi.from_dict(document)
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        cases = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(
            GenerationMode.NEGATIVE
        )

        @given(case=cases)
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: schemathesis.Case) -> None:
            response = case.call(base_url=base_url, headers=KEY, timeout=30)
            case.validate_response(response, checks=[not_a_server_error])

        try:
            check()
        except Exception as exc:  # one operation's failure must not hide the others'
            failures.append(f"{operation.label}: {str(exc)[:600]}")
    assert operations >= 15
    assert failures == []
