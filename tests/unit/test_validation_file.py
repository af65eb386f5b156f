"""A JSONL batch input file, checked as it streams: the validation report and its line codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from batchgw.config.catalog import Catalog, load_catalog
from batchgw.config.settings import Settings
from batchgw.validation import RequestInvalid
from batchgw.validation.create import BODY_VALIDATORS, PlannedRequest
from batchgw.validation.file import (
    MAX_ERRORS,
    FileReport,
    LineInvalid,
    iter_planned,
    report_object,
    split_lines,
    validate_file,
)

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(CONFIG)


def _body(model: str = "sim-chat", text: str = "hi", **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **fields}


def _line(
    custom_id: Any = "q-1", body: Any = None, *, url: Any = CHAT, method: Any = "POST", **extra: Any
) -> bytes:
    item = {"custom_id": custom_id, "method": method, "url": url, "body": _body() if body is None else body}
    return json.dumps({**item, **extra}).encode() + b"\n"


def _valid_lines(count: int, *, model: str = "sim-chat") -> list[bytes]:
    return [_line(f"q-{i}", _body(model)) for i in range(1, count + 1)]


def _validate(
    catalog: Catalog,
    lines: list[bytes],
    *,
    settings: Settings | None = None,
    endpoint: str = CHAT,
    **kwargs: Any,
) -> FileReport:
    return validate_file(
        iter(lines),
        endpoint=endpoint,
        settings=settings or Settings.model_validate({}),
        catalog=catalog,
        role="internal",
        **kwargs,
    )


def _codes(report: FileReport) -> list[tuple[int | None, str]]:
    return [(error["line"], error["code"]) for error in report.errors]


def _only_error(catalog: Catalog, line: bytes, **kwargs: Any) -> dict[str, Any]:
    report = _validate(catalog, [_line("q-0"), line], **kwargs)
    assert not report.ok
    assert len(report.errors) == 1, report.errors
    error = report.errors[0]
    assert error["line"] == 2
    return error


# --- a valid file -----------------------------------------------------------------------


def test_valid_file_is_ok_with_its_total_and_model(catalog: Catalog) -> None:
    report = _validate(catalog, _valid_lines(3))
    assert report.ok
    assert report.errors == []
    assert report.total == 3
    assert report.line_count == 3
    assert report.models == {"sim-chat"}
    assert report.model == "sim-chat"
    assert report.complete


def test_blank_lines_are_skipped_but_keep_their_line_numbers(catalog: Catalog) -> None:
    lines = [b"\n", _line("q-1"), b"   \t\n", b"\r\n", b"{not json\n", b"\n"]
    report = _validate(catalog, lines)
    assert report.total == 1
    assert report.line_count == 6
    assert _codes(report) == [(5, "invalid_json")]


def test_crlf_line_endings_and_a_last_line_without_newline_are_fine(catalog: Catalog) -> None:
    lines = [line.replace(b"\n", b"\r\n") for line in _valid_lines(2)] + [_line("q-3").rstrip(b"\n")]
    report = _validate(catalog, lines)
    assert report.ok
    assert report.total == 3


def test_an_alias_and_its_canonical_name_are_the_same_model(catalog: Catalog) -> None:
    report = _validate(catalog, [_line("q-1", _body("sim-chat-latest")), _line("q-2", _body("sim-chat"))])
    assert report.ok
    assert report.models == {"sim-chat"}


# --- the report -------------------------------------------------------------------------


def test_bad_lines_are_reported_with_their_physical_line_numbers(catalog: Catalog) -> None:
    lines = _valid_lines(10)
    lines[1] = b'{"custom_id": "x",\n'  # line 2: not JSON
    lines[4] = _line("q-1")  # line 5: custom_id of line 1
    lines[8] = _line("q-9", url="/v1/embeddings")  # line 9: another url
    report = _validate(catalog, lines)
    assert not report.ok
    assert _codes(report) == [(2, "invalid_json"), (5, "duplicate_custom_id"), (9, "invalid_url")]
    assert report.total == 7
    assert report.complete


def test_duplicate_custom_id_reads_as_the_spec_shows(catalog: Catalog) -> None:
    error = _only_error(catalog, _line("q-0"))
    assert error == {
        "code": "duplicate_custom_id",
        "message": "custom_id must be unique within the file.",
        "line": 2,
        "param": None,
    }


def test_every_problem_of_a_file_is_found_in_one_round_each_at_its_line(catalog: Catalog) -> None:
    settings = Settings.model_validate({"BATCH_MAX_LINE_KB": 1})
    lines = _valid_lines(8)
    lines[1] = b'{"custom_id": "q-x", "method": "POST",\n'  # line 2: bad JSON
    lines[2] = _line("q-1")  # line 3: custom_id of line 1
    lines[3] = _line("q-4", _body("sim-chat-only"))  # line 4: another model
    lines[4] = _line("q-5", _body(temperature=9))  # line 5: a body the endpoint refuses
    lines[5] = _line("q-6", _body(text="x" * 2000))  # line 6: over the line limit
    lines[6] = _line("q-7", url="/v1/embeddings")  # line 7: another endpoint
    report = _validate(catalog, lines, settings=settings)
    assert _codes(report) == [
        (2, "invalid_json"),
        (3, "duplicate_custom_id"),
        (4, "invalid_body"),
        (5, "invalid_body"),
        (6, "line_too_large"),
        (7, "invalid_url"),
    ]
    assert report.errors[2]["param"] == "body.model" and "line 1" in report.errors[2]["message"]
    assert report.errors[3]["param"] == "body.temperature"
    assert (report.problem_count, report.unlisted, report.total) == (6, 0, 2)
    assert report.complete


def test_problems_past_the_cap_are_counted_not_listed_and_the_whole_file_is_read(catalog: Catalog) -> None:
    lines = [b"[]\n"] * (MAX_ERRORS + 37) + _valid_lines(5)
    report = _validate(catalog, lines)
    assert MAX_ERRORS == 100
    assert [error["line"] for error in report.errors] == list(range(1, MAX_ERRORS + 1))
    assert (report.problem_count, report.unlisted) == (MAX_ERRORS + 37, 37)
    assert report.complete and report.line_count == MAX_ERRORS + 42
    assert report.total == 5


def test_a_problem_of_the_whole_file_is_listed_even_past_the_cap(catalog: Catalog) -> None:
    settings = Settings.model_validate({"BATCH_MAX_REQUESTS": 5})
    report = _validate(catalog, [b"[]\n"] * 9, settings=settings, max_errors=2)
    assert _codes(report) == [(1, "invalid_line"), (2, "invalid_line"), (6, "too_many_lines")]
    assert (report.problem_count, report.unlisted) == (6, 3)
    assert not report.complete


def test_max_errors_is_the_callers_to_choose(catalog: Catalog) -> None:
    report = _validate(catalog, [b"[]\n"] * 5, max_errors=2)
    assert _codes(report) == [(1, "invalid_line"), (2, "invalid_line")]
    assert report.problem_count == 5


def test_report_object_has_openais_list_shape(catalog: Catalog) -> None:
    report = _validate(catalog, [_line("q-1"), _line("q-1")])
    assert report_object(report.errors) == {
        "object": "list",
        "data": [
            {
                "code": "duplicate_custom_id",
                "message": "custom_id must be unique within the file.",
                "param": None,
                "line": 2,
            }
        ],
    }


# --- every line code --------------------------------------------------------------------


def test_empty_file_is_refused_without_a_line(catalog: Catalog) -> None:
    for lines in ([], [b"\n", b"  \r\n"]):
        report = _validate(catalog, lines)
        assert not report.ok
        assert report.errors == [
            {
                "code": "empty_file",
                "message": "The file has no requests: it is empty or every line is blank",
                "line": None,
                "param": None,
            }
        ]


def test_too_many_lines_is_reported_once_at_the_first_line_over_the_limit(catalog: Catalog) -> None:
    settings = Settings.model_validate({"BATCH_MAX_REQUESTS": 3})
    lines = [_valid_lines(1)[0], b"\n", *_valid_lines(6)[1:]]  # q-1, blank, q-2..q-6
    report = _validate(catalog, lines, settings=settings)
    assert _codes(report) == [(5, "too_many_lines")]
    assert "at most 3" in report.errors[0]["message"]
    assert not report.complete


def test_a_file_at_the_line_limit_is_ok(catalog: Catalog) -> None:
    settings = Settings.model_validate({"BATCH_MAX_REQUESTS": 3})
    report = _validate(catalog, [*_valid_lines(3), b"\n"], settings=settings)
    assert report.ok
    assert report.total == 3


def test_line_too_large_counts_the_line_without_its_ending(catalog: Catalog) -> None:
    settings = Settings.model_validate({"BATCH_MAX_LINE_KB": 1})
    exact = _line("q-1", _body(text="x"))
    exact = exact[:-1] + b" " * (1024 - len(exact) + 1) + b"\r\n"  # 1024 bytes of content
    large = _line("q-2", _body(text="x" * 1024))
    report = _validate(catalog, [exact, large], settings=settings)
    assert _codes(report) == [(2, "line_too_large")]
    assert report.total == 1


def test_invalid_json_covers_non_utf8_and_non_finite_numbers(catalog: Catalog) -> None:
    for raw in (
        b'{"custom_id": \xff}\n',
        b'{"a": NaN}\n',
        b'{"a": 1e999}\n',
        b"{} {}\n",
    ):
        error = _only_error(catalog, raw)
        assert error["code"] == "invalid_json", raw
        assert error["message"].startswith("The line is not valid JSON")


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'["q-1"]\n', None),
        (b'"q-1"\n', None),
        (b'{"custom_id": "q-1", "url": "/v1/chat/completions", "body": {}}\n', "method"),
        (b'{"method": "POST", "url": "/v1/chat/completions", "body": {}}\n', "custom_id"),
        (_line("q-1", extra_field=1), "extra_field"),
    ],
)
def test_a_line_not_shaped_as_a_request_is_invalid_line(
    catalog: Catalog, raw: bytes, param: str | None
) -> None:
    error = _only_error(catalog, raw)
    assert (error["code"], error["param"]) == ("invalid_line", param)


@pytest.mark.parametrize("custom_id", ["", "x" * 513, 7, None, ["q"]])
def test_custom_id_must_be_a_string_of_1_to_512_characters(catalog: Catalog, custom_id: Any) -> None:
    error = _only_error(catalog, _line(custom_id))
    assert (error["code"], error["param"]) == ("invalid_custom_id", "custom_id")


def test_a_custom_id_of_512_characters_is_fine(catalog: Catalog) -> None:
    assert _validate(catalog, [_line("x" * 512)]).ok


@pytest.mark.parametrize("method", ["GET", "post", None])
def test_method_must_be_post(catalog: Catalog, method: Any) -> None:
    error = _only_error(catalog, _line("q-1", method=method))
    assert (error["code"], error["param"]) == ("invalid_method", "method")


@pytest.mark.parametrize("url", ["/v1/embeddings", "/v1/chat/completions/", None, 3])
def test_url_must_be_the_batch_endpoint(catalog: Catalog, url: Any) -> None:
    error = _only_error(catalog, _line("q-1", url=url))
    assert (error["code"], error["param"]) == ("invalid_url", "url")
    assert "'/v1/chat/completions'" in error["message"]


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"model": "sim-chat"}, "invalid_body", "body.messages"),
        ("text", "invalid_body", "body"),
        (_body(temperature=3), "invalid_body", "body.temperature"),
        (_body(stream=True), "unsupported_feature", "body.stream"),
        (_body("no-such-model"), "model_not_found", "body.model"),
        (_body("auto"), "model_unsupported", "body.model"),
        (_body("sim-embed"), "model_unsupported", "body.model"),
    ],
)
def test_a_body_is_checked_as_the_endpoint_would(catalog: Catalog, body: Any, code: str, param: str) -> None:
    error = _only_error(catalog, _line("q-1", body))
    assert (error["code"], error["param"]) == (code, param)


@pytest.mark.parametrize("code", ["missing_max_tokens", "max_tokens_too_large"])
def test_a_body_validators_code_becomes_the_lines_code(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, code: Any
) -> None:
    def refuse_without_flag(body: Any) -> str:
        if body.get("refuse"):
            raise RequestInvalid(code, "refused", param="max_tokens")
        return str(body["model"])

    monkeypatch.setitem(BODY_VALIDATORS, CHAT, refuse_without_flag)
    error = _only_error(catalog, _line("q-1", _body(refuse=True)))
    assert (error["code"], error["message"], error["param"]) == (code, "refused", "body.max_tokens")


def test_a_model_without_a_price_is_model_not_priced() -> None:
    config = json.loads(CONFIG.read_text())
    del config["models"]["sim-chat-only"]["price"]
    unpriced = Catalog.model_validate(config)
    error = _only_error(unpriced, _line("q-1", _body("sim-chat-only")))
    assert (error["code"], error["param"]) == ("model_not_priced", "body.model")


def test_every_line_must_use_the_same_model(catalog: Catalog) -> None:
    lines = [_line("q-1", _body("sim-chat-latest")), _line("q-2", _body("sim-chat-only")), _line("q-3")]
    report = _validate(catalog, lines)
    assert _codes(report) == [(2, "invalid_body")]
    error = report.errors[0]
    assert error["param"] == "body.model"
    assert error["message"].startswith("all lines must use the same model")
    assert "'sim-chat-only'" in error["message"]
    assert "line 1 uses 'sim-chat-latest'" in error["message"]


def test_the_first_valid_line_sets_the_model(catalog: Catalog) -> None:
    lines = [
        _line("q-1", _body("sim-chat", temperature=9)),
        _line("q-2", _body("sim-chat-only")),
        _line("q-3"),
    ]
    report = _validate(catalog, lines)
    assert _codes(report) == [(1, "invalid_body"), (3, "invalid_body")]
    assert report.models == {"sim-chat-only"}


def test_a_line_refused_later_still_claims_its_custom_id(catalog: Catalog) -> None:
    report = _validate(catalog, [_line("q-1", method="GET"), _line("q-1")])
    assert _codes(report) == [(1, "invalid_method"), (2, "duplicate_custom_id")]


# --- the second pass --------------------------------------------------------------------


def test_iter_planned_yields_each_request_of_a_valid_file(catalog: Catalog) -> None:
    lines = [b"\n", _line("q-1", _body("sim-chat-latest")), _line("q-2").replace(b"\n", b"\r\n")]
    planned = list(iter_planned(iter(lines), endpoint=CHAT, catalog=catalog, role="internal"))
    assert planned == [
        PlannedRequest("q-1", "POST", CHAT, _body("sim-chat-latest"), "sim-chat"),
        PlannedRequest("q-2", "POST", CHAT, _body(), "sim-chat"),
    ]


def test_iter_planned_raises_at_a_line_that_is_not_what_was_validated(catalog: Catalog) -> None:
    planned = iter_planned(
        iter([_line("q-1"), _line("q-1")]), endpoint=CHAT, catalog=catalog, role="internal"
    )
    assert next(planned).custom_id == "q-1"
    with pytest.raises(LineInvalid) as caught:
        next(planned)
    assert (caught.value.code, caught.value.line) == ("duplicate_custom_id", 2)


def test_iter_planned_finds_a_duplicate_among_thousands_of_custom_ids(catalog: Catalog) -> None:
    lines = [*_valid_lines(3000), _line("q-1")]
    planned = iter_planned(iter(lines), endpoint=CHAT, catalog=catalog, role="internal")
    with pytest.raises(LineInvalid) as caught:
        for _ in planned:
            pass
    assert (caught.value.code, caught.value.line) == ("duplicate_custom_id", 3001)


def test_iter_planned_applies_the_limits_when_given_settings(catalog: Catalog) -> None:
    settings = Settings.model_validate({"BATCH_MAX_REQUESTS": 1})
    planned = iter_planned(
        iter(_valid_lines(2)), endpoint=CHAT, catalog=catalog, role="internal", settings=settings
    )
    with pytest.raises(LineInvalid, match="at most 1") as caught:
        list(planned)
    assert caught.value.code == "too_many_lines"


# --- lines from a stream of chunks ------------------------------------------------------


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1 << 20])
def test_split_lines_gives_the_physical_lines_whatever_the_chunk_size(size: int) -> None:
    data = b'{"a": 1}\r\n\n  \n{"b": 2}\n{"c": 3}'
    lines = list(split_lines(_chunks(data, size), max_line_bytes=1024))
    assert lines == [b'{"a": 1}\r', b"", b"  ", b'{"b": 2}', b'{"c": 3}']


def test_split_lines_counts_no_extra_line_after_a_final_newline() -> None:
    assert list(split_lines([b"a\n", b"b\n"], max_line_bytes=8)) == [b"a", b"b"]
    assert list(split_lines([b""], max_line_bytes=8)) == []


@pytest.mark.parametrize("size", [1, 5, 1 << 20])
def test_split_lines_cuts_an_overlong_line_yet_it_is_still_too_large(catalog: Catalog, size: int) -> None:
    settings = Settings.model_validate({"BATCH_MAX_LINE_KB": 1})
    long_line = _line("q-2", _body(text="x" * 5000))
    data = _line("q-1") + long_line + _line("q-3")
    lines = list(split_lines(_chunks(data, size), max_line_bytes=1024))
    assert len(lines) == 3
    assert len(lines[1]) == 1026
    report = _validate(catalog, lines, settings=settings)
    assert _codes(report) == [(2, "line_too_large")]


def test_split_lines_keeps_a_line_of_exactly_the_limit_whole() -> None:
    line = b"x" * 1023 + b"\r"
    assert list(split_lines(_chunks(line + b"\ny", 100), max_line_bytes=1023)) == [line, b"y"]


def test_a_byte_order_mark_may_open_the_file_but_not_a_later_line(catalog: Catalog) -> None:
    first = b"\xef\xbb\xbf" + _line("q-1", _body())
    report = _validate(catalog, [first, _line("q-2", _body())])
    assert report.ok and report.total == 2
    later = b"\xef\xbb\xbf" + _line("q-4", _body())
    report = _validate(catalog, [_line("q-3", _body()), later])
    assert _codes(report) == [(2, "invalid_json")]
