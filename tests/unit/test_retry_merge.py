"""A retry's merged results (``api.retry.merge_lines``): the earlier batch's lines in its
order, each replaced by the later batch's line of the same custom_id."""

from __future__ import annotations

import json

from batchgw.api.retry import merge_lines


def line(custom_id: str, batch: str) -> bytes:
    return json.dumps({"id": f"{batch}-{custom_id}", "custom_id": custom_id}).encode() + b"\n"


def merged(earlier: list[bytes], later: list[bytes]) -> list[str]:
    return [json.loads(x)["id"] for x in merge_lines(iter(earlier), iter(later))]


def test_the_later_batch_replaces_the_lines_it_ran_again_in_the_earlier_order() -> None:
    earlier = [line(c, "p") for c in ("a", "b", "c", "d")]
    assert merged(earlier, [line("b", "c1"), line("d", "c1")]) == ["p-a", "c1-b", "p-c", "c1-d"]


def test_nothing_run_again_leaves_the_earlier_lines_and_every_one_replaced_leaves_none() -> None:
    earlier = [line(c, "p") for c in ("a", "b")]
    assert merged(earlier, []) == ["p-a", "p-b"]
    assert merged(earlier, [line("a", "c"), line("b", "c")]) == ["c-a", "c-b"]


def test_a_later_line_the_earlier_batch_never_named_is_kept_at_the_end() -> None:
    assert merged([line("a", "p")], [line("z", "c"), line("y", "c")]) == ["p-a", "c-z", "c-y"]
