"""The arithmetic of ``make cost``: AWS's billing rules (bench.cost_model) and the run's plumbing
that needs no stack (bench.cost, bench.cost_replay's request classification)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import cost_model as m
from bench import prices
from bench.cost_inputs import function_memory_mb, log_bytes, remaining_transitions
from bench.cost_replay import classify
from bench.cost_report import provisioned_cost, scheduling_cost
from infra.capacity import TableCapacity

KB = 1024


def string_item(total_bytes: int) -> dict[str, dict[str, str]]:
    """An item of exactly ``total_bytes`` by DynamoDB's rules: ``pk`` (2 bytes) and ``v``."""
    return {"pk": {"S": "a"}, "v": {"S": "x" * (total_bytes - len("pk") - 1 - len("v"))}}


# --- item sizes -----------------------------------------------------------------------------


def test_item_size_counts_attribute_names_and_values() -> None:
    assert m.item_size({"pk": {"S": "batch_1"}, "idx": {"N": "12345"}}) == 2 + 7 + 3 + 4
    assert m.item_size(string_item(2560)) == 2560


def test_binary_values_count_their_bytes_not_their_base64() -> None:
    assert m.item_size({"b": {"B": "AAECAwQ="}}) == 1 + 5  # base64 of 5 bytes, as on the wire
    assert m.item_size({"b": {"B": b"\x00\x01\x02"}}) == 1 + 3


def test_lists_and_maps_cost_three_bytes_and_one_per_element() -> None:
    assert m.item_size({"l": {"L": [{"S": "ab"}, {"BOOL": True}]}}) == 1 + 3 + (1 + 2) + (1 + 1)
    assert m.item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + 1 + 1 + 1


def test_no_item_has_no_size() -> None:
    assert m.item_size(None) == 0


# --- write and read units ---------------------------------------------------------------------


def test_transactional_write_of_a_2_5_kb_item_costs_6_wru() -> None:
    size = m.item_size(string_item(2560))
    assert m.write_units(0, size, transactional=True) == 6
    assert m.write_units(0, size, transactional=False) == 3


def test_write_is_billed_on_the_larger_old_item() -> None:
    assert m.write_units(3 * KB, KB // 2, transactional=False) == 3
    assert m.write_units(KB // 2, 3 * KB, transactional=False) == 3


def test_write_of_a_missing_item_costs_one_unit_at_least() -> None:
    assert m.write_units(0, 0, transactional=False) == 1
    assert m.write_units(0, 0, transactional=True) == 2


def test_exactly_one_kb_is_one_unit_one_byte_more_is_two() -> None:
    assert m.write_units(0, KB, transactional=False) == 1
    assert m.write_units(0, KB + 1, transactional=False) == 2


def test_read_units_by_4_kb_and_consistency() -> None:
    assert m.read_units(4 * KB, m.Consistency.STRONG) == 1
    assert m.read_units(4 * KB + 1, m.Consistency.STRONG) == 2
    assert m.read_units(4 * KB + 1, m.Consistency.EVENTUAL) == 1
    assert m.read_units(100, m.Consistency.EVENTUAL) == 0.5
    assert m.read_units(5 * KB, m.Consistency.TRANSACTIONAL) == 4


# --- index writes -----------------------------------------------------------------------------

RUNNING = m.IndexSpec("running", keys=("pk", "lease_until"), table_keys=("pk", "idx"), projection="KEYS_ONLY")
BY_OWNER = m.IndexSpec("by_owner", keys=("owner", "created_key"), table_keys=("pk", "sk"), projection="ALL")


def request_item(**extra: dict[str, str]) -> dict[str, dict[str, str]]:
    return {"pk": {"S": "b1"}, "idx": {"N": "7"}, "body": {"S": "x" * 3000}, **extra}


def test_claim_puts_the_request_into_the_keys_only_index_by_its_keys_alone() -> None:
    before = request_item()
    after = request_item(lease_until={"N": "1700000000"})
    assert m.index_write_units(RUNNING, before, after) == 1  # keys only: not the 3 KB body


def test_moving_an_index_key_deletes_and_puts() -> None:
    before = request_item(lease_until={"N": "1700000000"})
    after = request_item(lease_until={"N": "1700000180"})
    assert m.index_write_units(RUNNING, before, after) == 2


def test_ending_removes_the_request_from_the_index() -> None:
    assert m.index_write_units(RUNNING, request_item(lease_until={"N": "1"}), request_item()) == 1


def test_keys_only_index_is_not_written_when_only_other_attributes_change() -> None:
    before = request_item(lease_until={"N": "1"})
    after = {**request_item(lease_until={"N": "1"}), "res": {"S": "done"}}
    assert m.index_write_units(RUNNING, before, after) == 0
    assert m.index_write_units(RUNNING, request_item(), {**request_item(), "res": {"S": "r"}}) == 0


def test_all_projection_index_rewrites_the_whole_item_on_any_change() -> None:
    owner = {"owner": {"S": "u1"}, "created_key": {"S": "2026"}}
    before = {"pk": {"S": "b"}, "sk": {"S": "meta"}, **owner, "blob": {"S": "y" * 1500}}
    after = {**before, "status": {"S": "completed"}}
    assert m.index_write_units(BY_OWNER, before, after) == 2  # about 1.5 KB projected
    assert m.index_write_units(BY_OWNER, before, dict(before)) == 0


# --- Lambda, X-Ray, chunks --------------------------------------------------------------------


def test_gb_seconds_round_each_invocation_up_to_the_millisecond() -> None:
    assert m.gb_seconds([2.0, 2.0], 1024) == pytest.approx(4.0)
    assert m.gb_seconds([0.5], 2048) == pytest.approx(1.0)
    assert m.gb_seconds([0.0001], 1024) == pytest.approx(0.001)


def test_xray_samples_one_a_second_and_five_percent_of_the_rest() -> None:
    assert m.xray_traces(100, 10) == pytest.approx(10 + 0.05 * 90)
    assert m.xray_traces(5, 10) == pytest.approx(5)


def test_payload_chunks() -> None:
    assert m.chunks(0, 64 * KB) == 1
    assert m.chunks(64 * KB, 64 * KB) == 1
    assert m.chunks(64 * KB + 1, 64 * KB) == 2


# --- pricing ----------------------------------------------------------------------------------


def test_price_of_a_tiny_fixture() -> None:
    usage = [
        m.UsageLine("DynamoDB", "write Requests", "dynamodb_wru", 6.0),
        m.UsageLine("DynamoDB", "write Requests", "dynamodb_wru", 4.0),  # same component: summed
        m.UsageLine("DynamoDB", "read Requests", "dynamodb_rru", 2.0),
        m.UsageLine("Lambda", "worker invocations", "lambda_request", 0.1),
        m.UsageLine("Lambda", "worker GB-s", "lambda_gb_second", 0.25),
        m.UsageLine("Step Functions", "transitions", "sfn_transition", 0.02),
    ]
    breakdown = m.price(usage)
    dynamodb = 10 * 0.625 + 2 * 0.125
    lambda_ = 0.1 * 0.20 + 0.25 * 1e6 * 0.0000133334
    sfn = 0.02 * 1e6 * 0.025 / 1000
    assert breakdown.total == pytest.approx(dynamodb + lambda_ + sfn)
    assert list(breakdown.by_service()) == ["DynamoDB", "Lambda", "Step Functions"]
    assert breakdown.by_service()["DynamoDB"] == pytest.approx(6.5)
    assert breakdown.dominant(1)[0].component == "write Requests"
    assert len(breakdown.lines) == 5


def test_provisioned_units_cost_the_hour_over_the_units_an_hour_serves_at_the_utilization() -> None:
    usage = [
        m.UsageLine("DynamoDB", "write Requests", "dynamodb_wru", 10.0),
        m.UsageLine("DynamoDB", "read Requests", "dynamodb_rru", 2.0),
        m.UsageLine("Lambda", "worker invocations", "lambda_request", 0.1),
    ]
    full = m.price(usage, m.provisioned_prices(1.0)).by_service()
    assert full["DynamoDB"] == pytest.approx(1e6 * (10 * 0.00065 + 2 * 0.00013) / 3600)
    assert full["Lambda"] == pytest.approx(0.1 * 0.20)  # the rest is priced as before
    half = m.price(usage, m.provisioned_prices(0.5)).by_service()
    assert half["DynamoDB"] == pytest.approx(2 * full["DynamoDB"])  # half used: each unit costs twice
    with pytest.raises(ValueError):
        m.provisioned_prices(0.0)


def test_provisioned_cost_at_the_target_and_at_the_scale_in_threshold_and_its_monthly_floor() -> None:
    usage = [m.UsageLine("DynamoDB", "write Requests", "dynamodb_wru", 10.0)]
    figures = provisioned_cost(
        usage, TableCapacity(mode="provisioned", target_utilization=80, read_units=(2, 9))
    )
    unit_hour = 0.00065 / 3600 * 1e6 * 10
    assert figures["usd_per_million_at_target"] == pytest.approx(unit_hour / 0.8)
    assert figures["scale_in_utilization"] == pytest.approx(0.6)
    assert figures["usd_per_million_at_scale_in"] == pytest.approx(unit_hour / 0.6)
    assert figures["break_even_utilization"] == pytest.approx(0.00065 / 3600 / 0.625e-6)  # about 29 %
    assert figures["write_units_per_request"] == 10.0 and figures["read_units_per_request"] == 0.0
    n = figures["tables_and_indexes"]
    assert n >= 3
    per_target = (2 * 0.00013 + 5 * 0.00065) * 730 + 8 * 0.10  # minimum capacity, 4 alarms x 2 dimensions
    assert figures["monthly_floor_usd"] == pytest.approx(n * per_target)


def test_usage_lines_round_trip_through_json() -> None:
    line = m.UsageLine("SQS", "SendMessage work", "sqs_standard", 0.3)
    assert m.UsageLine.from_json(json.loads(json.dumps(line.to_json()))) == line


# --- the run's plumbing -----------------------------------------------------------------------


def test_remaining_transitions_follow_the_success_path() -> None:
    asl = {
        "States": {
            "Ended": {"Type": "Choice", "Choices": [{"Next": "Done"}], "Default": "Keep"},
            "Keep": {"Type": "Wait", "Seconds": 1, "Next": "Purge"},
            "Purge": {"Type": "Task", "Next": "Done"},
            "Done": {"Type": "Succeed"},
        }
    }
    assert remaining_transitions(asl, "Ended") == 3
    assert remaining_transitions(asl, "Done") == 0


def test_function_memory_is_read_from_the_cdk_construct(tmp_path: Path) -> None:
    source = tmp_path / "functions.py"
    source.write_text(
        "class F:\n"
        "    def build(self):\n"
        '        self.api = self._function("Api", "api", timeout=T, memory_size=1024, description="")\n'
        '        self.w = self._function("Worker", "worker", timeout=T, memory_size=512, description="")\n'
    )
    assert function_memory_mb(source) == {"api": 1024, "worker": 512}


def test_logs_are_counted_by_their_json_lines_not_the_local_stacks_plain_text(tmp_path: Path) -> None:
    emitted = b'{"level":"INFO","message":"request ended"}\n'
    metric = b'{"_aws":{"Timestamp":1},"BatchesEnded":[1.0]}\n'
    local = b"2026-12-02 01:08:12,759 worker-0.0 INFO httpx: HTTP Request: POST http://127.0.0.1\n"
    (tmp_path / "worker-0.0.log").write_bytes(local + emitted + local)
    (tmp_path / "worker-1.0.log").write_bytes(metric)
    (tmp_path / "moto.log").write_bytes(local)
    assert log_bytes(tmp_path) == {"api": 0, "worker": len(emitted) + len(metric), "lifecycle": 0}


def test_recorded_requests_are_classified_by_service_and_operation() -> None:
    def entry(url: str, method: str = "POST", **headers: str) -> dict[str, object]:
        return {"url": url, "method": method, "headers": headers, "body": "", "body_encoded": False}

    s3_auth = "AWS4-HMAC-SHA256 Credential=testing/20261201/us-east-1/s3/aws4_request, SignedHeaders=host"
    dynamodb = classify(0, entry("http://127.0.0.1:1/", **{"X-Amz-Target": "DynamoDB_20120810.UpdateItem"}))
    assert (dynamodb.service, dynamodb.operation) == ("dynamodb", "UpdateItem")
    copy = classify(
        1, entry("http://h/bucket/files/x", "PUT", Authorization=s3_auth, **{"x-amz-copy-source": "b/k"})
    )
    assert (copy.service, copy.operation) == ("s3", "CopyObject")
    listing = classify(2, entry("http://h/bucket?list-type=2", "GET", Authorization=s3_auth))
    assert listing.operation == "ListObjects"
    presigned = classify(
        3,
        entry("http://h/bucket/files/x?X-Amz-Credential=t%2F20261201%2Fus-east-1%2Fs3%2Faws4_request", "GET"),
    )
    assert (presigned.service, presigned.operation) == ("s3", "GetObject")
    invoke = classify(4, entry("http://h/2015-03-31/functions/batchgw-lifecycle/invocations"))
    assert (invoke.service, invoke.operation) == ("lambda", "Invoke:batchgw-lifecycle")


def test_scheduling_cost_counts_only_the_reads_and_writes_of_scheduling_partitions() -> None:
    usage = [
        m.UsageLine("DynamoDB", "read control interactive Query eventual", "dynamodb_rru", 2.0),
        m.UsageLine("DynamoDB", "write control slots#* Update", "dynamodb_wru", 1.0),
        m.UsageLine("DynamoDB", "write control job#* Update tx", "dynamodb_wru", 4.0),  # the batch's own
        m.UsageLine("SQS", "requests worker", "sqs_request", 3.0),
    ]

    expected = 1e6 * (2.0 * prices.DYNAMODB_READ_UNIT.each + 1.0 * prices.DYNAMODB_WRITE_UNIT.each)
    assert scheduling_cost(usage) == pytest.approx(expected)
