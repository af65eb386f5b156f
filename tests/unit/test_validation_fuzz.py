"""Unexpected JSON anywhere in a file line never breaks file validation: the report names
the line with a code (so a file batch fails validation; it never stays ``validating``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

from batchgw.config.catalog import load_catalog
from batchgw.config.settings import Settings
from batchgw.validation.file import FileLineCode, validate_file
from hypothesis import given, settings
from hypothesis import strategies as st

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "config" / "models.local.json")
SETTINGS = Settings.model_validate({})
LINES = {
    "/v1/chat/completions": {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/embeddings": {"model": "sim-embed", "input": "hi"},
    "/v1/responses": {"model": "sim-chat", "input": [{"role": "user", "content": "hi"}]},
    "/v1/messages": {"model": "sim-claude", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]},
}
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += paths(inner, (*prefix, index))
    return found


@st.composite
def mutated_lines(draw: st.DrawFn) -> tuple[str, bytes]:
    url = draw(st.sampled_from(sorted(LINES)))
    line: Any = {"custom_id": "a", "method": "POST", "url": url, "body": json.loads(json.dumps(LINES[url]))}
    path = draw(st.sampled_from(paths(line)))
    new = draw(values)
    if not path:
        line = new
    else:
        node = line
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = new
    return url, json.dumps(line).encode()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(case=mutated_lines())
def test_a_file_line_with_unexpected_json_anywhere_is_reported_with_its_code(case: tuple[str, bytes]) -> None:
    url, line = case
    report = validate_file(
        [line],
        endpoint=url,
        settings=SETTINGS,
        catalog=CATALOG,
        role="internal",
        anthropic_version="2023-06-01",
    )
    assert report.ok or [problem["line"] for problem in report.errors] == [1]
    assert all(problem["code"] in get_args(FileLineCode) for problem in report.errors)
