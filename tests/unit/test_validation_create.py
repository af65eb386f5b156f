"""POST /v1/batches with direct requests: the whole batch is checked before anything is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from batchgw.config.catalog import Catalog, load_catalog
from batchgw.config.settings import Settings
from batchgw.domain.errors import BadRequest
from batchgw.validation import RequestInvalid
from batchgw.validation.create import (
    BODY_VALIDATORS,
    VERSIONED_BODY_VALIDATORS,
    CreatePlan,
    PlannedRequest,
    validate_create,
)

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(CONFIG)


def _chat(model: str = "sim-chat", text: str = "hi", **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **fields}


def _request(custom_id: Any = "q-1", body: Any = None, **fields: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "body": _chat() if body is None else body, **fields}


def _create(
    catalog: Catalog, body: Any, *, settings: Settings | None = None, role: str = "internal"
) -> CreatePlan:
    return validate_create(body, settings=settings or Settings.model_validate({}), catalog=catalog, role=role)


def _refused(catalog: Catalog, body: Any, **kwargs: Any) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        _create(catalog, body, **kwargs)
    assert caught.value.status == 400
    assert caught.value.code == 400
    return caught.value


def _cause(error: BadRequest) -> RequestInvalid:
    assert isinstance(error.__cause__, RequestInvalid)
    return error.__cause__


# --- a valid batch ----------------------------------------------------------------------


def test_valid_batch_plans_every_request_in_order(catalog: Catalog) -> None:
    body = {
        "requests": [
            _request("q-1", method="POST", url="/v1/chat/completions"),
            _request("q-2", _chat("sim-chat-only", max_tokens=50)),
        ],
        "metadata": {"project": "eval-42"},
    }
    plan = _create(catalog, body)
    assert plan == CreatePlan(
        endpoint="/v1/chat/completions",
        requests=[
            PlannedRequest("q-1", "POST", "/v1/chat/completions", _chat(), "sim-chat"),
            PlannedRequest(
                "q-2", "POST", "/v1/chat/completions", _chat("sim-chat-only", max_tokens=50), "sim-chat-only"
            ),
        ],
        metadata={"project": "eval-42"},
    )


def test_spec_example_is_accepted(catalog: Catalog) -> None:
    example = """{"requests": [
      {"custom_id": "q-1", "method": "POST", "url": "/v1/chat/completions",
       "body": {"model": "sim-chat",
                "messages": [{"role": "user", "content": "Summarize the plot of Hamlet."}]}},
      {"custom_id": "q-2", "method": "POST", "url": "/v1/chat/completions",
       "body": {"model": "sim-chat", "max_tokens": 50,
                "messages": [{"role": "user", "content": "Translate \\"good morning\\" into French."}]}}
    ], "metadata": {"project": "eval-42"}}"""
    plan = _create(catalog, json.loads(example))
    assert [r.custom_id for r in plan.requests] == ["q-1", "q-2"]


def test_method_and_url_default_to_post_chat_completions(catalog: Catalog) -> None:
    plan = _create(catalog, {"requests": [{"custom_id": "q-1", "body": _chat()}]})
    assert plan.endpoint == "/v1/chat/completions"
    assert (plan.requests[0].method, plan.requests[0].url) == ("POST", "/v1/chat/completions")


def test_alias_keeps_its_name_in_the_body_and_runs_on_the_canonical_model(catalog: Catalog) -> None:
    body = _chat("sim-chat-latest")
    plan = _create(catalog, {"requests": [_request("q-1", body)]})
    assert plan.requests[0].body is body
    assert plan.requests[0].body["model"] == "sim-chat-latest"
    assert plan.requests[0].model == "sim-chat"


def test_one_batch_may_use_several_models(catalog: Catalog) -> None:
    requests = [_request("a", _chat("sim-chat")), _request("b", _chat("sim-chat-only"))]
    plan = _create(catalog, {"requests": requests})
    assert [r.model for r in plan.requests] == ["sim-chat", "sim-chat-only"]


# --- models -----------------------------------------------------------------------------


def test_unknown_model_is_refused_naming_the_request(catalog: Catalog) -> None:
    requests = [_request("q-1"), _request("q-2", _chat("no-such-model"))]
    error = _refused(catalog, {"requests": requests})
    assert error.body() == {
        "error": {
            "message": "requests[1] (custom_id 'q-2'): Model 'no-such-model' not found",
            "type": "invalid_request_error",
            "param": "requests[1].body.model",
            "code": 400,
        }
    }
    assert _cause(error).code == "model_not_found"


def test_model_the_role_may_not_use_reads_like_an_unknown_one(catalog: Catalog) -> None:
    raw = json.loads(CONFIG.read_text())
    raw["models"]["sim-chat"]["roles"] = ["admin"]
    restricted = Catalog.model_validate(raw)
    error = _refused(restricted, {"requests": [_request("q-1")]})
    assert error.message == "requests[0] (custom_id 'q-1'): Model 'sim-chat' not found"
    assert _create(restricted, {"requests": [_request("q-1")]}, role="admin").requests[0].model == "sim-chat"


@pytest.mark.parametrize("model", ["auto", "auto-fast"])
def test_auto_models_are_refused(catalog: Catalog, model: str) -> None:
    error = _refused(catalog, {"requests": [_request("q-1", _chat(model))]})
    assert "auto models cannot be used in a batch; name a specific model" in error.message
    assert error.message.startswith("requests[0] (custom_id 'q-1'): ")
    assert _cause(error).code == "model_unsupported"


def test_embeddings_model_on_the_chat_endpoint_is_refused(catalog: Catalog) -> None:
    error = _refused(catalog, {"requests": [_request("q-1", _chat("sim-embed"))]})
    assert error.message == (
        "requests[0] (custom_id 'q-1'): Model 'sim-embed' does not serve /v1/chat/completions"
    )
    assert error.param == "requests[0].body.model"
    assert _cause(error).code == "model_unsupported"


# --- the create body --------------------------------------------------------------------


@pytest.mark.parametrize("body", [None, [], "requests", 1])
def test_body_that_is_not_an_object_is_refused(catalog: Catalog, body: Any) -> None:
    _refused(catalog, body)


def test_missing_requests_are_refused(catalog: Catalog) -> None:
    assert _refused(catalog, {"metadata": {}}).param == "requests"


@pytest.mark.parametrize("requests", [None, {"custom_id": "q-1"}, "q-1"])
def test_requests_that_are_not_an_array_are_refused(catalog: Catalog, requests: Any) -> None:
    assert _refused(catalog, {"requests": requests}).param == "requests"


def test_empty_requests_are_refused(catalog: Catalog) -> None:
    assert "at least one" in _refused(catalog, {"requests": []}).message


def test_more_requests_than_the_limit_are_refused_naming_the_limit(catalog: Catalog) -> None:
    settings = Settings.model_validate({"BATCH_MAX_REQUESTS": 3})
    requests = [_request(f"q-{i}") for i in range(4)]
    error = _refused(catalog, {"requests": requests}, settings=settings)
    assert "at most 3 requests" in error.message
    assert error.param == "requests"
    assert len(_create(catalog, {"requests": requests[:3]}, settings=settings).requests) == 3


def test_input_file_id_with_requests_is_refused(catalog: Catalog) -> None:
    error = _refused(catalog, {"requests": [_request()], "input_file_id": "file-1"})
    assert error.param == "input_file_id"


@pytest.mark.parametrize("field", ["anthropic_version", "requets", "output_expires_after"])
def test_unknown_top_level_field_is_refused(catalog: Catalog, field: str) -> None:
    error = _refused(catalog, {"requests": [_request()], field: "x"})
    assert error.message.startswith(f"Unknown field '{field}'")
    assert error.param == field


@pytest.mark.parametrize("window", ["24h", "48h", "72h", "168h"])
def test_the_windows_a_file_batch_takes_are_accepted_inline_too(catalog: Catalog, window: str) -> None:
    assert (
        _create(catalog, {"requests": [_request()], "completion_window": window}).completion_window == window
    )


@pytest.mark.parametrize("window", ["1h", "7d", 24, ["24h"], ""])
def test_other_completion_window_is_refused(catalog: Catalog, window: Any) -> None:
    error = _refused(catalog, {"requests": [_request()], "completion_window": window})
    assert error.param == "completion_window"


# --- metadata ---------------------------------------------------------------------------


@pytest.mark.parametrize("metadata", [None, {}])
def test_null_or_empty_metadata_is_accepted(catalog: Catalog, metadata: Any) -> None:
    assert _create(catalog, {"requests": [_request()], "metadata": metadata}).metadata == metadata


def test_metadata_at_its_limits_is_accepted(catalog: Catalog) -> None:
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    assert _create(catalog, {"requests": [_request()], "metadata": metadata}).metadata == metadata


def test_metadata_with_more_than_16_pairs_is_refused(catalog: Catalog) -> None:
    error = _refused(catalog, {"requests": [_request()], "metadata": {str(i): "v" for i in range(17)}})
    assert "at most 16" in error.message
    assert error.param == "metadata"


def test_metadata_key_longer_than_64_characters_is_refused(catalog: Catalog) -> None:
    error = _refused(catalog, {"requests": [_request()], "metadata": {"k" * 65: "v"}})
    assert "longer than 64" in error.message


def test_metadata_value_longer_than_512_characters_is_refused(catalog: Catalog) -> None:
    error = _refused(catalog, {"requests": [_request()], "metadata": {"k": "v" * 513}})
    assert "longer than 512" in error.message
    assert error.param == "metadata.k"


@pytest.mark.parametrize("metadata", [{"k": 1}, {"k": None}, {"k": ["v"]}, ["k", "v"], "k=v"])
def test_metadata_that_is_not_string_pairs_is_refused(catalog: Catalog, metadata: Any) -> None:
    error = _refused(catalog, {"requests": [_request()], "metadata": metadata})
    assert (error.param or "").startswith("metadata")


# --- custom_id --------------------------------------------------------------------------


def test_custom_id_of_512_characters_is_accepted(catalog: Catalog) -> None:
    assert _create(catalog, {"requests": [_request("x" * 512)]}).requests[0].custom_id == "x" * 512


@pytest.mark.parametrize("custom_id", ["", "x" * 513, 7, ["q-1"]])
def test_invalid_custom_id_is_refused_without_naming_it(catalog: Catalog, custom_id: Any) -> None:
    error = _refused(catalog, {"requests": [_request("q-1"), _request(custom_id)]})
    assert error.message == "requests[1]: custom_id must be a string of 1-512 characters"
    assert error.param == "requests[1].custom_id"
    assert _cause(error).code == "invalid_custom_id"


def test_missing_custom_id_is_refused(catalog: Catalog) -> None:
    error = _refused(catalog, {"requests": [{"body": _chat()}]})
    assert error.message == "requests[0]: custom_id is required"


def test_duplicate_custom_id_is_refused_naming_it(catalog: Catalog) -> None:
    requests = [_request("q-1"), _request("q-2"), _request("q-1")]
    error = _refused(catalog, {"requests": requests})
    assert error.message.startswith("requests[2] (custom_id 'q-1'): custom_id 'q-1' is repeated (requests[0]")
    assert error.param == "requests[2].custom_id"
    assert _cause(error).code == "duplicate_custom_id"


# --- each request -----------------------------------------------------------------------


@pytest.mark.parametrize("item", ["q-1", None, ["q-1"]])
def test_request_that_is_not_an_object_is_refused(catalog: Catalog, item: Any) -> None:
    error = _refused(catalog, {"requests": [_request(), item]})
    assert error.message.startswith("requests[1]: ")
    assert error.param == "requests[1]"


def test_unknown_request_field_is_refused(catalog: Catalog) -> None:
    error = _refused(catalog, {"requests": [{"custom_id": "q-1", "params": _chat()}]})
    assert error.message.startswith("requests[0] (custom_id 'q-1'): unknown field 'params'")


@pytest.mark.parametrize("method", ["GET", "post", 1])
def test_method_other_than_post_is_refused(catalog: Catalog, method: Any) -> None:
    error = _refused(catalog, {"requests": [_request(method=method)]})
    assert error.message == "requests[0] (custom_id 'q-1'): method must be POST"
    assert _cause(error).code == "invalid_method"


def test_mixed_urls_are_refused(catalog: Catalog) -> None:
    requests = [_request("q-1"), _request("q-2", {"model": "sim-embed", "input": "hi"}, url="/v1/embeddings")]
    error = _refused(catalog, {"requests": requests})
    assert error.message.startswith("requests[1] (custom_id 'q-2'): url '/v1/embeddings' differs")
    assert error.param == "requests[1].url"
    assert _cause(error).code == "invalid_url"


def test_defaulted_url_counts_as_chat_completions_when_urls_are_compared(catalog: Catalog) -> None:
    requests = [_request("q-1"), _request("q-2", url="/v1/chat/completions")]
    assert _create(catalog, {"requests": requests}).endpoint == "/v1/chat/completions"


@pytest.mark.parametrize("url", ["/v1/completions", "/v1/chat/completions/", "", 5])
def test_unknown_url_is_refused(catalog: Catalog, url: Any) -> None:
    assert _cause(_refused(catalog, {"requests": [_request(url=url)]})).code == "invalid_url"


@pytest.mark.parametrize("url", ["/v1/embeddings", "/v1/responses", "/v1/messages"])
def test_target_without_a_body_validator_is_refused(
    catalog: Catalog, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(BODY_VALIDATORS, url, raising=False)
    monkeypatch.delitem(VERSIONED_BODY_VALIDATORS, url, raising=False)
    error = _refused(catalog, {"requests": [_request(url=url)]})
    assert "cannot be batched yet" in error.message


def test_a_target_joins_through_the_body_validator_table(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(BODY_VALIDATORS, "/v1/embeddings", lambda body: body["model"])
    body = {"model": "sim-embed", "input": "hi"}
    plan = _create(catalog, {"requests": [_request("e-1", body, url="/v1/embeddings")]})
    assert plan.endpoint == "/v1/embeddings"
    assert plan.requests[0].model == "sim-embed"
    error = _refused(catalog, {"requests": [_request("e-1", _chat(), url="/v1/embeddings")]})
    assert error.message == "requests[0] (custom_id 'e-1'): Model 'sim-chat' does not serve /v1/embeddings"


@pytest.mark.parametrize("body", [None, "hi", [_chat()]])
def test_missing_or_non_object_body_is_refused(catalog: Catalog, body: Any) -> None:
    error = _refused(catalog, {"requests": [{"custom_id": "q-1", "body": body}]})
    assert error.param == "requests[0].body"
    assert _cause(error).code == "invalid_body"


def test_the_first_invalid_request_is_the_one_reported(catalog: Catalog) -> None:
    requests = [_request("ok"), _request("bad-1", _chat(stream=True)), _request("bad-2", _chat("nope"))]
    error = _refused(catalog, {"requests": requests})
    assert error.message.startswith("requests[1] (custom_id 'bad-1'): ")


def test_body_error_is_prefixed_with_the_request_and_keeps_its_line_code(catalog: Catalog) -> None:
    error = _refused(catalog, {"requests": [_request("q-9", _chat(stop=["a", "b", "c", "d", "e"]))]})
    assert error.message == (
        "requests[0] (custom_id 'q-9'): stop has 5 sequences; a request may have at most 4"
    )
    assert error.param == "requests[0].body.stop"
    cause = _cause(error)
    assert (cause.code, cause.param) == ("invalid_body", "body.stop")


# --- the file validation report's codes, for direct requests too -----------------------------


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/v1/chat/completions", _chat(max_tokens=16385), "max_tokens"),
        ("/v1/chat/completions", _chat(max_completion_tokens=20000), "max_completion_tokens"),
        (
            "/v1/responses",
            {"model": "sim-chat", "input": "hi", "max_output_tokens": 99999},
            "max_output_tokens",
        ),
    ],
)
def test_a_request_asking_more_output_than_its_model_answers_is_max_tokens_too_large(
    catalog: Catalog, url: str, body: dict[str, Any], field: str
) -> None:
    error = _refused(catalog, {"requests": [_request(body=body, url=url)]})
    assert _cause(error).code == "max_tokens_too_large"
    assert error.param == f"requests[0].body.{field}" and "16384" in error.message
    _create(catalog, {"requests": [_request(body=_chat(max_tokens=16384))]})  # the limit itself is fine


def load_catalog_text(text: str) -> Catalog:
    return Catalog.model_validate(json.loads(text.replace("${", "{")))  # URLs need not resolve


def test_a_model_without_a_price_is_model_not_priced_for_direct_requests(catalog: Catalog) -> None:
    raw = json.loads(CONFIG.read_text())
    del raw["models"]["sim-chat"]["price"]
    unpriced = load_catalog_text(json.dumps(raw))
    error = _refused(unpriced, {"requests": [_request()]})
    assert _cause(error).code == "model_not_priced" and error.param == "requests[0].body.model"
