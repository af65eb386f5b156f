"""The console's stricter check of a batch input file (``validation.strict``): the type from
url or body, the model and overrides chosen for every request, the fields the gateway would
not forward, and problems that name line, custom_id and field, never content."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from batchgw.config.catalog import Catalog, load_catalog
from batchgw.validation import strict
from batchgw.validation.strict import CHAT, EMBEDDINGS, Choices, Limits, Report, check, stored_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"
LIMITS = Limits(max_requests=100, max_line_bytes=4096, max_stored_bytes=1_000_000)
SECRET = "the-users-private-words"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(CONFIG)


def chat(custom_id: str = "q-1", text: str = SECRET, **fields: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}], **fields},
    }


def embed(custom_id: str = "e-1", **fields: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "body": {"model": "sim-embed", "input": SECRET, **fields}}


def run(
    catalog: Catalog,
    lines: Iterable[dict[str, Any] | bytes],
    choices: Choices | None = None,
    role: str = "internal",
) -> Report:
    raw = [line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines]
    return check(lambda: iter(raw), choices or Choices(), catalog=catalog, role=role, limits=LIMITS)


def codes(report: Report) -> list[tuple[int | None, str, str | None]]:
    assert SECRET not in json.dumps(report.problems)  # never the request's content
    return [(p["line"], p["code"], p["field"]) for p in report.problems]


def test_a_file_without_urls_is_typed_by_its_bodies_and_stored_with_its_canonical_model(
    catalog: Catalog,
) -> None:
    report = run(catalog, [chat("a"), chat("b"), chat("c"), chat("d")])
    assert report.valid, report.problems
    assert (report.endpoint, report.endpoint_from, report.model, report.requests) == (
        CHAT,
        "body",
        "sim-chat",
        4,
    )
    assert [r["custom_id"] for r in report.first] == ["a", "b", "c"]
    assert report.first[0] == {"custom_id": "a", "method": "POST", "url": CHAT, "body": chat("a")["body"]}
    embeddings = run(catalog, [{**embed(), "url": EMBEDDINGS, "method": "POST"}])
    assert (embeddings.endpoint, embeddings.endpoint_from) == (EMBEDDINGS, "url")


def test_the_chosen_model_and_chat_overrides_apply_to_every_stored_request(catalog: Catalog) -> None:
    choices = Choices(model="sim-chat-only", temperature=0.3, max_tokens=50)
    lines = [chat("a"), chat("b", temperature=1.5)]
    report = run(catalog, lines, choices)
    assert report.valid and report.model == "sim-chat-only"
    stored = [
        json.loads(line)
        for line in stored_lines(
            lambda: iter(json.dumps(x).encode() for x in lines), report, choices, limits=LIMITS
        )
    ]
    assert [s["body"]["model"] for s in stored] == ["sim-chat-only"] * 2
    assert [(s["body"]["temperature"], s["body"]["max_tokens"]) for s in stored] == [(0.3, 50)] * 2
    assert stored[0] == report.first[0]
    assert sum(len(json.dumps(s, separators=(",", ":"))) + 1 for s in stored) == report.stored_bytes


def test_fields_the_gateway_would_not_forward_are_errors_with_a_hint(catalog: Catalog) -> None:
    report = run(
        catalog, [chat("a", max_completion_tokens=5), chat("b", user="u-1"), chat("c", store=True), chat("d")]
    )
    assert codes(report) == [
        (1, "unforwarded_field", "body.max_completion_tokens"),
        (2, "unforwarded_field", "body.user"),
        (3, "unforwarded_field", "body.store"),
    ]
    assert "rename it to max_tokens" in report.problems[0]["message"]
    assert [p["custom_id"] for p in report.problems] == ["a", "b", "c"]
    assert report.first == []  # nothing shown of a file that is not valid


def test_a_bom_repeated_keys_and_non_finite_numbers_are_errors_naming_the_field(catalog: Catalog) -> None:
    good = json.dumps(chat("a")).encode()
    report = run(
        catalog,
        [
            b"\xef\xbb\xbf" + good,
            b'{"custom_id": "b", "body": {"model": "sim-chat", "model": "sim-chat", "messages": []}}',
            b'{"custom_id": "c", "body": {"model": "sim-chat", "temperature": NaN, "messages": []}}',
            b'{"custom_id": "d", "body": {"model": "sim-chat", '
            b'"messages": [{"role": "user", "content": "x", "n": 1e999}]}}',
            json.dumps(chat("e")).encode(),
        ],
    )
    assert codes(report) == [
        (1, "bom", None),
        (2, "repeated_key", "body.model"),
        (3, "non_finite_number", "body.temperature"),
        (4, "non_finite_number", "body.messages[0].n"),
    ]
    assert [p["custom_id"] for p in report.problems] == [None, "b", "c", "d"]


def test_a_file_mixing_types_or_a_url_its_body_contradicts_is_refused_whatever_was_chosen(
    catalog: Catalog,
) -> None:
    mixed = run(catalog, [chat("a"), embed("b"), chat("c")], Choices(endpoint=CHAT))
    assert codes(mixed) == [(2, "mixed_types", None)]
    contradicted = run(catalog, [{**chat("a"), "url": EMBEDDINGS}])
    assert codes(contradicted) == [(1, "url_contradicts_body", "url")]
    other = run(catalog, [{**chat("a"), "url": "/v1/responses"}])
    assert codes(other) == [(1, "invalid_url", "url")]
    against = run(catalog, [chat("a")], Choices(endpoint=EMBEDDINGS))
    assert codes(against) == [(None, "endpoint_contradicts_file", "endpoint")]


def test_the_type_is_asked_for_only_when_no_line_says(catalog: Catalog) -> None:
    silent = {"custom_id": "a", "body": {"model": "sim-chat"}}
    assert codes(run(catalog, [silent])) == [(None, "endpoint_needed", "endpoint")]
    chosen = run(catalog, [silent], Choices(endpoint=CHAT))
    assert chosen.endpoint_from == "choice"
    assert codes(chosen) == [(1, "invalid_body", "body.messages")]  # then checked as a Chat request


def test_several_models_or_one_the_caller_cannot_use_need_a_choice(catalog: Catalog) -> None:
    two = [chat("a"), {**chat("b"), "body": {**chat("b")["body"], "model": "sim-chat-only"}}]
    assert codes(run(catalog, two)) == [(2, "model_choice_required", "body.model")]  # the first other one
    assert run(catalog, two, Choices(model="sim-chat")).valid
    unknown = [{**chat("a"), "body": {**chat("a")["body"], "model": "no-such-model"}}]
    assert codes(run(catalog, unknown)) == [(1, "model_choice_required", "body.model")]
    assert codes(run(catalog, [chat("a")], Choices(model="no-such-model"))) == [
        (None, "model_not_found", "model")
    ]


def test_overrides_apply_to_chat_only_and_are_range_checked(catalog: Catalog) -> None:
    assert codes(run(catalog, [embed()], Choices(temperature=0.5))) == [
        (None, "override_not_applicable", "temperature")
    ]
    assert codes(run(catalog, [chat()], Choices(temperature=3.0, max_tokens=0))) == [
        (None, "invalid_override", "temperature"),
        (None, "invalid_override", "max_tokens"),
    ]


def test_every_line_gets_the_checks_of_a_batch_request_and_its_problem_never_quotes_content(
    catalog: Catalog,
) -> None:
    bad_role = {
        "custom_id": "a",
        "body": {"model": "sim-chat", "messages": [{"role": SECRET, "content": "x"}]},
    }
    report = run(catalog, [bad_role, chat("b"), chat("b"), b"not json", b"", json.dumps(["a"]).encode()])
    # Every problem in one check, by line: lines that cannot be read hold back no other line's.
    assert codes(report) == [
        (1, "invalid_body", "body.messages[0].role"),
        (3, "duplicate_custom_id", "custom_id"),
        (4, "invalid_json", None),
        (6, "invalid_line", None),
    ]
    assert report.problems[1]["custom_id"] == "b"


def test_four_different_problems_on_four_lines_are_four_problems_in_one_check(catalog: Catalog) -> None:
    other_model = {**chat("d"), "body": {**chat("d")["body"], "model": "sim-chat-only"}}
    lines = [chat("a"), b'{"custom_id": "b", "body": {', chat("a"), chat("c", temperature=9), other_model]
    lines += [b"x" * 5000, chat("f", n=0)]
    report = run(catalog, lines)
    assert codes(report) == [
        (2, "invalid_json", None),
        (3, "duplicate_custom_id", "custom_id"),
        (4, "invalid_body", "body.temperature"),
        (5, "model_choice_required", "body.model"),  # another model
        (6, "line_too_large", None),
        (7, "invalid_body", "body.n"),
    ]
    assert [p["custom_id"] for p in report.problems] == [None, "a", "c", None, None, "f"]
    assert not report.truncated and report.unlisted == 0
    # Another type (the model question waits for it), and each line still checked as its own.
    mixed = run(catalog, [chat("a"), {**embed("b"), "url": EMBEDDINGS}, chat("a"), embed("d", dimensions=0)])
    assert codes(mixed) == [
        (2, "mixed_types", None),
        (3, "duplicate_custom_id", "custom_id"),
        (4, "invalid_body", "body.dimensions"),
    ]


def test_problems_past_the_cap_are_counted(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strict, "MAX_PROBLEMS", 3)
    report = run(catalog, [b"[]"] * 5 + [chat("a")])
    assert [p["line"] for p in report.problems] == [1, 2, 3]
    assert report.truncated and report.unlisted == 2


def test_an_empty_file_too_many_lines_and_too_many_stored_bytes_are_refused(catalog: Catalog) -> None:
    assert codes(run(catalog, [b"", b"  "])) == [(None, "empty_file", None)]
    small = Limits(max_requests=2, max_line_bytes=4096, max_stored_bytes=250)
    lines = [json.dumps(chat(f"q{i}")).encode() for i in range(3)]
    report = check(lambda: iter(lines), Choices(), catalog=catalog, role="internal", limits=small)
    assert [(p["line"], p["code"]) for p in report.problems] == [(2, "too_large"), (3, "too_many_lines")]


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.one_of(
            st.binary(max_size=64),
            _JSONISH.map(lambda v: json.dumps(v).encode()),
            st.builds(
                lambda cid, body, url: json.dumps({"custom_id": cid, "body": body, "url": url}).encode(),
                st.text(max_size=4),
                st.dictionaries(st.sampled_from(["model", "messages", "input", "user", "n"]), _JSONISH),
                st.sampled_from([None, CHAT, EMBEDDINGS, "/v1/x", 3]),
            ),
        ),
        max_size=6,
    ),
    endpoint=st.sampled_from([None, CHAT, EMBEDDINGS, "nope"]),
    model=st.sampled_from([None, "sim-chat", "sim-embed", "nope"]),
)
def test_whatever_a_file_holds_the_check_answers_a_report_and_never_raises(
    catalog: Catalog, lines: list[bytes], endpoint: str | None, model: str | None
) -> None:
    report = check(
        lambda: iter(lines), Choices(endpoint, model), catalog=catalog, role="internal", limits=LIMITS
    )
    assert report.valid == (not report.problems)
    assert all(set(p) == {"line", "custom_id", "field", "code", "message"} for p in report.problems)
    if report.valid:
        assert report.endpoint in (CHAT, EMBEDDINGS) and report.model is not None and report.requests > 0
