"""Where a batch runs (``domain.modes``), how a provider-run batch is cut into parts, and what
each provider's result lines mean for our requests (``domain.provider``). Pure."""

from __future__ import annotations

import json

from batchgw.domain.modes import Mode, ModeReason, choose_mode
from batchgw.domain.provider import (
    MAX_LINES,
    Part,
    PartStatus,
    Planner,
    anthropic_line,
    index_of,
    line_id,
    openai_line,
    runs_provider_batches,
    scrub_ids,
)


def test_gateway_is_asked_for_and_kept_provider_only_where_it_may_run() -> None:
    assert choose_mode(Mode.GATEWAY, eligible=True, window="24h", cheaper=True).mode is Mode.GATEWAY
    assert choose_mode(Mode.PROVIDER, eligible=True, window="24h", cheaper=False).mode is Mode.PROVIDER
    assert choose_mode(Mode.PROVIDER, eligible=False, window="24h", cheaper=True) is None
    assert choose_mode(Mode.PROVIDER, eligible=True, window="48h", cheaper=True) is None


def test_auto_runs_on_the_provider_only_when_it_may_and_it_is_cheaper() -> None:
    def auto(**kw: object) -> tuple[Mode, ModeReason]:
        choice = choose_mode(Mode.AUTO, **{"eligible": True, "window": "24h", "cheaper": True, **kw})  # type: ignore[arg-type]
        assert choice is not None
        return choice.mode, choice.reason

    assert auto() == (Mode.PROVIDER, ModeReason.PROVIDER_CHEAPER)
    assert auto(eligible=False) == (Mode.GATEWAY, ModeReason.NO_BATCH_ROUTE)
    assert auto(window="72h") == (Mode.GATEWAY, ModeReason.WINDOW)
    assert auto(cheaper=False) == (Mode.GATEWAY, ModeReason.NOT_CHEAPER)


def test_parts_hold_one_model_each_within_the_providers_lines() -> None:
    planner = Planner({"a": ("cloud", "openai"), "b": ("cloud", "anthropic")}, max_lines=3)
    for index in range(10):
        planner.add(index, "a" if index % 2 == 0 else "b", 100)
    parts = planner.done(10)
    by_model = {m: [(p.start, p.end, p.lines) for p in parts if p.model == m] for m in "ab"}
    assert by_model["a"] == [(0, 6, 3), (6, 10, 2)]  # 0,2,4 | 6,8
    assert by_model["b"] == [(1, 7, 3), (7, 10, 2)]  # 1,3,5 | 7,9
    assert sorted(p.n for p in parts) == [0, 1, 2, 3]
    assert MAX_LINES == {"openai": 50_000, "anthropic": 100_000}


def test_a_part_is_cut_before_the_providers_bytes_run_out() -> None:
    planner = Planner({"a": ("cloud", "openai")})
    planner.add(0, "a", 150 * 1024 * 1024)
    planner.add(1, "a", 100 * 1024 * 1024)  # 250 MB together: over OpenAI's 200 MB
    assert [(p.start, p.end, p.lines) for p in planner.done(2)] == [(0, 1, 1), (1, 2, 1)]


def test_a_part_is_stored_and_read_back_as_it_was() -> None:
    part = Part(
        2, "a", "cloud", 0, 9, 4, PartStatus.SUBMITTED, ref="x", provider_batch_id="b", polls=3, version=5
    )
    assert Part.from_item({**part.to_item(), "version": 5}) == part
    assert part.next_poll_seconds(120) == 8 and part.replace(polls=20).next_poll_seconds(120) == 120


def test_provider_ids_are_ours_by_index_and_nothing_else() -> None:
    assert line_id(41) == "r41" and index_of("r41") == 41
    assert index_of("ticket-41") is None and index_of(41) is None
    assert scrub_ids("batch_abc failed in file-x", ("batch_abc", None, "file-x")) == (
        "[provider id] failed in [provider id]"
    )


def test_openai_lines_are_answers_or_what_the_provider_left_unrun() -> None:
    done = openai_line(
        {"custom_id": "r3", "response": {"status_code": 200, "request_id": "q", "body": {"id": "c"}}}
    )
    assert done is not None and (done.index, done.status, json.loads(done.content)) == (3, 200, {"id": "c"})
    expired = openai_line({"custom_id": "r4", "response": None, "error": {"code": "batch_expired"}})
    assert expired is not None and expired.unrun == "expired"
    failed = openai_line({"custom_id": "r5", "error": {"code": "x", "message": "bad"}})
    assert failed is not None and failed.status == 500 and b"bad" in failed.content
    assert openai_line({"custom_id": "t-1", "response": {"status_code": 200}}) is None


def test_anthropic_results_become_answers_with_their_error_status() -> None:
    ok = anthropic_line({"custom_id": "r0", "result": {"type": "succeeded", "message": {"id": "m"}}})
    assert ok is not None and ok.status == 200
    errored = anthropic_line(
        {
            "custom_id": "r1",
            "result": {
                "type": "errored",
                "error": {"type": "error", "error": {"type": "invalid_request_error"}},
            },
        }
    )
    assert errored is not None and errored.status == 400
    canceled = anthropic_line({"custom_id": "r2", "result": {"type": "canceled"}})
    assert canceled is not None and canceled.unrun == "cancelled"


def test_only_an_administrators_false_keeps_provider_batches_off_a_route() -> None:
    assert runs_provider_batches(None)  # the route's default: its batch service and price allow it
    assert runs_provider_batches(True)
    assert not runs_provider_batches(False)


def test_a_part_runs_at_the_provider_from_its_submit_until_it_ended_there() -> None:
    part = Part(0, "m", "cloud", 0, 2, 2)
    assert not part.live and not part.ended
    assert part.replace(status=PartStatus.SUBMITTING).live
    assert part.replace(status=PartStatus.SUBMITTED, provider_batch_id="b").live
    assert part.replace(suspect_from=1.0, suspect_to=2.0).live  # a lost submit's batch may run
    lost = part.replace(status=PartStatus.LOST, provider_batch_id="b", provider_file_id="f")
    assert lost.ended and not lost.live and lost.left_at_provider
    assert not lost.replace(cleaned=True).left_at_provider
    refused = part.replace(status=PartStatus.COLLECTED)  # rejected at submit: nothing made there
    assert refused.ended and not refused.left_at_provider
