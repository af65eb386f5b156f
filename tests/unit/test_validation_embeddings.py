"""Embeddings bodies in a batch: checked as the endpoint would check them, nothing dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from batchgw.config.catalog import Catalog, load_catalog
from batchgw.config.settings import Settings
from batchgw.domain.errors import BadRequest
from batchgw.validation import RequestInvalid
from batchgw.validation.create import CreatePlan, validate_create
from batchgw.validation.embeddings import MAX_INPUTS, validate_embeddings_body

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"
SETTINGS = Settings.model_validate({})


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(CONFIG)


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "sim-embed", "input": "hello", **fields}


def _create(catalog: Catalog, body: Any) -> CreatePlan:
    request = {"custom_id": "e-1", "url": "/v1/embeddings", "body": body}
    return validate_create({"requests": [request]}, settings=SETTINGS, catalog=catalog, role="internal")


def _refused(catalog: Catalog, body: Any) -> tuple[BadRequest, RequestInvalid]:
    with pytest.raises(BadRequest) as caught:
        _create(catalog, body)
    error = caught.value
    assert error.message.startswith("requests[0] (custom_id 'e-1'): ")
    assert isinstance(error.__cause__, RequestInvalid)
    return error, error.__cause__


def test_valid_embeddings_batch_plans_the_model(catalog: Catalog) -> None:
    plan = _create(catalog, _body(dimensions=256, encoding_format="base64", user="u-1"))
    assert plan.endpoint == "/v1/embeddings"
    assert plan.requests[0].model == "sim-embed"
    assert plan.requests[0].body["dimensions"] == 256


def test_validator_returns_the_model_name() -> None:
    assert validate_embeddings_body(_body()) == "sim-embed"


@pytest.mark.parametrize(
    "value",
    [
        "one text",
        ["one", "two"],
        [1, 2, 3, 0],
        [[1, 2], [3], [0, 4, 5]],
        ["x"] * MAX_INPUTS,
    ],
    ids=["string", "strings", "token_ids", "token_arrays", "max_items"],
)
def test_every_input_shape_is_accepted(catalog: Catalog, value: Any) -> None:
    assert _create(catalog, _body(input=value)).requests[0].body["input"] == value


def test_missing_input_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, {"model": "sim-embed"})
    assert error.param == "requests[0].body.input"
    assert cause.code == "invalid_body"


@pytest.mark.parametrize("value", ["", [], None, 5, {"text": "x"}])
def test_empty_or_non_array_input_is_refused(catalog: Catalog, value: Any) -> None:
    body = _body(input=value)
    error, _ = _refused(catalog, body)
    assert error.param == "requests[0].body.input"


@pytest.mark.parametrize(
    ("value", "param"),
    [
        (["a", ""], "input[1]"),
        (["a", 3], "input[1]"),
        ([1, -1], "input[1]"),
        ([1, True], "input[1]"),
        ([1, 2.5], "input[1]"),
        ([[1], []], "input[1]"),
        ([[1], [2, -3]], "input[1][1]"),
        ([[1], "a"], "input[1]"),
        ([None], "input[0]"),
    ],
)
def test_malformed_input_items_are_refused_naming_the_item(catalog: Catalog, value: Any, param: str) -> None:
    error, cause = _refused(catalog, _body(input=value))
    assert error.param == f"requests[0].body.{param}"
    assert cause.code == "invalid_body"


def test_more_inputs_than_allowed_are_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(input=["x"] * (MAX_INPUTS + 1)))
    assert f"at most {MAX_INPUTS}" in error.message


@pytest.mark.parametrize("dimensions", [0, -1, 1.5, "256", True])
def test_dimensions_must_be_a_positive_integer(catalog: Catalog, dimensions: Any) -> None:
    error, _ = _refused(catalog, _body(dimensions=dimensions))
    assert error.param == "requests[0].body.dimensions"


def test_unknown_encoding_format_is_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(encoding_format="int8"))
    assert error.param == "requests[0].body.encoding_format"


def test_non_string_user_is_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(user=7))
    assert error.param == "requests[0].body.user"


@pytest.mark.parametrize("field", ["input_type", "truncate", "seed"])
def test_unknown_fields_are_refused_not_dropped(catalog: Catalog, field: str) -> None:
    error, cause = _refused(catalog, _body(**{field: "x"}))
    assert f"unknown field '{field}'" in error.message
    assert "nothing is silently dropped" in error.message
    assert error.param == f"requests[0].body.{field}"
    assert cause.code == "invalid_body"


def test_stream_true_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(stream=True))
    assert error.param == "requests[0].body.stream"
    assert cause.code == "unsupported_feature"


def test_stream_false_is_accepted(catalog: Catalog) -> None:
    _create(catalog, _body(stream=False))


@pytest.mark.parametrize("model", [None, "", 3])
def test_missing_or_non_string_model_is_refused(catalog: Catalog, model: Any) -> None:
    error, _ = _refused(catalog, _body(model=model))
    assert error.param == "requests[0].body.model"


def test_chat_model_on_the_embeddings_target_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(model="sim-chat"))
    assert error.message.endswith("Model 'sim-chat' does not serve /v1/embeddings")
    assert cause.code == "model_unsupported"


def test_anthropic_version_in_the_body_is_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(anthropic_version="2023-06-01"))
    assert error.param == "requests[0].body.anthropic_version"


def test_embeddings_batch_with_an_anthropic_version_header_is_refused(catalog: Catalog) -> None:
    request = {"custom_id": "e-1", "url": "/v1/embeddings", "body": _body()}
    with pytest.raises(BadRequest) as caught:
        validate_create(
            {"requests": [request]},
            settings=SETTINGS,
            catalog=catalog,
            role="internal",
            anthropic_version="2023-06-01",
        )
    assert caught.value.message == "the anthropic-version header is only for /v1/messages batches"
