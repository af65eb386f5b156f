"""A transaction that conflicts with others in flight, or that the table's throughput
refused, is tried again, a bounded number of times, with pauses that grow and are jittered
(so the conflicting writers spread out)."""

from __future__ import annotations

from typing import Any

import pytest
from batchgw.domain.errors import StorageError
from batchgw.storage import dynamo
from batchgw.storage.dynamo import Table, conflict_pause
from botocore.exceptions import ClientError


def _conflict(*reasons: str) -> ClientError:
    response: Any = {
        "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
        "CancellationReasons": [{"Code": reason} for reason in reasons],
    }
    return ClientError(response, "TransactWriteItems")


class ConflictingClient:
    """A DynamoDB client whose transactions conflict ``conflicts`` times, then apply."""

    def __init__(self, conflicts: int, reasons: tuple[str, ...] = ("None", "TransactionConflict")) -> None:
        self.conflicts = conflicts
        self.reasons = reasons
        self.tries = 0

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        self.tries += 1
        if self.tries <= self.conflicts:
            raise _conflict(*self.reasons)
        return {}


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(dynamo, "_sleep", slept.append)
    return slept


def test_the_pause_doubles_from_20_ms_up_to_half_a_second_and_is_jittered() -> None:
    assert [conflict_pause(tries, lambda: 1.0) for tries in range(1, 8)] == [
        0.02,
        0.04,
        0.08,
        0.16,
        0.32,
        0.5,
        0.5,
    ]
    assert conflict_pause(3, lambda: 0.25) == pytest.approx(0.02)  # a quarter of 0.08
    assert conflict_pause(3, lambda: 0.0) == 0.0


def test_a_conflicting_transaction_is_tried_again_until_it_applies(pauses: list[float]) -> None:
    client = ConflictingClient(conflicts=3)
    assert Table(client, "t").transact([{"Put": {}}], failure="could not write") is None
    assert client.tries == 4 and len(pauses) == 3
    assert all(0 <= pause <= bound for pause, bound in zip(pauses, (0.02, 0.04, 0.08), strict=True))


def test_conflicts_that_persist_end_in_a_storage_error_after_a_bounded_time(pauses: list[float]) -> None:
    client = ConflictingClient(conflicts=1000)
    with pytest.raises(StorageError, match="transaction conflicts persisted"):
        Table(client, "t").transact([{"Put": {}}], failure="could not write")
    assert client.tries == 8 and len(pauses) == 7  # no pause after the last try
    assert sum(pauses) <= 0.02 + 0.04 + 0.08 + 0.16 + 0.32 + 0.5 + 0.5


def test_a_condition_that_failed_is_answered_at_once_not_tried_again(pauses: list[float]) -> None:
    client = ConflictingClient(conflicts=1000, reasons=("ConditionalCheckFailed", "TransactionConflict"))
    cancelled = Table(client, "t").transact([{"Put": {}}, {"Put": {}}], failure="could not write")
    assert cancelled is not None and client.tries == 1 and pauses == []


@pytest.mark.parametrize("reason", ["ThrottlingError", "ProvisionedThroughputExceeded"])
def test_a_transaction_refused_for_throughput_is_tried_again_until_it_applies(
    pauses: list[float], reason: str
) -> None:
    client = ConflictingClient(conflicts=2, reasons=("None", reason))
    assert Table(client, "t").transact([{"Put": {}}, {"Put": {}}], failure="could not write") is None
    assert client.tries == 3 and len(pauses) == 2
    assert all(0 <= pause <= bound for pause, bound in zip(pauses, (0.05, 0.1), strict=True))


def test_throughput_pauses_double_from_50_ms_up_to_2_s() -> None:
    pauses = [conflict_pause(tries, lambda: 1.0, throttled=True) for tries in range(1, 8)]
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]


def test_a_cancellation_for_another_reason_is_answered_at_once(pauses: list[float]) -> None:
    client = ConflictingClient(conflicts=1000, reasons=("None", "ValidationError"))
    cancelled = Table(client, "t").transact([{"Put": {}}, {"Put": {}}], failure="could not write")
    assert cancelled is not None and list(cancelled.reasons) == ["None", "ValidationError"]
    assert client.tries == 1 and pauses == []


class UnprocessingClient:
    """A DynamoDB client whose batch calls leave the last item unprocessed ``times`` times."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.calls: list[int] = []

    def _left(self, requests: list[Any]) -> list[Any]:
        self.calls.append(len(requests))
        return requests[-1:] if len(self.calls) <= self.times else []

    def batch_write_item(self, RequestItems: dict[str, list[Any]]) -> dict[str, Any]:
        left = self._left(RequestItems["t"])
        return {"UnprocessedItems": {"t": left} if left else {}}

    def batch_get_item(self, RequestItems: dict[str, dict[str, Any]]) -> dict[str, Any]:
        keys = RequestItems["t"]["Keys"]
        left = self._left(keys)
        found = [key for key in keys if key not in left]
        return {"Responses": {"t": found}, "UnprocessedKeys": {"t": {"Keys": left}} if left else {}}


def test_unprocessed_items_are_written_again_after_growing_pauses(pauses: list[float]) -> None:
    client = UnprocessingClient(times=3)
    Table(client, "t").put_many([{"pk": str(i)} for i in range(3)])
    assert client.calls == [3, 1, 1, 1] and len(pauses) == 3
    assert all(0 <= pause <= bound for pause, bound in zip(pauses, (0.02, 0.04, 0.08), strict=True))


def test_unprocessed_keys_are_read_again_after_growing_pauses(pauses: list[float]) -> None:
    client = UnprocessingClient(times=2)
    keys = [{"pk": {"S": str(i)}} for i in range(3)]
    assert Table(client, "t").get_many(keys) == keys
    assert client.calls == [3, 1, 1] and len(pauses) == 2


def test_items_left_unprocessed_try_after_try_end_in_a_storage_error(pauses: list[float]) -> None:
    with pytest.raises(StorageError, match="could not write 1 items"):
        Table(UnprocessingClient(times=1000), "t").put_many([{"pk": "a"}])
    assert len(pauses) == 9  # ten tries, a pause between each two


def test_throughput_refusals_that_persist_end_in_a_storage_error_that_says_so(pauses: list[float]) -> None:
    client = ConflictingClient(conflicts=1000, reasons=("None", "ThrottlingError"))
    with pytest.raises(StorageError, match="throughput refusals persisted"):
        Table(client, "t").transact([{"Put": {}}, {"Put": {}}], failure="could not write")
    assert client.tries == 8 and sum(pauses) <= 0.05 + 0.1 + 0.2 + 0.4 + 0.8 + 1.6 + 2.0
