"""The arithmetic of ``make cost``: AWS's billing rules applied to what a run measured. Pure.

``bench.cost_replay`` turns a run into ``Usage`` (billed units per request, by service and
component); ``price`` multiplies it by ``bench.prices`` into dollars per million requests.
The rules that turn a DynamoDB call into units live here too, so they are tested alone:
item sizes as DynamoDB counts them, write and read units, index writes, Lambda GB-seconds,
X-Ray's sampling and SQS's 64 KB chunks.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bench import prices as p

REQUESTS_PER_MILLION = 1_000_000
SECONDS_PER_HOUR = 3600

# --- DynamoDB item sizes and capacity units -------------------------------------------------

# A List or Map costs 3 bytes, and each of its elements 1 more (developer guide, "Item sizes").
_CONTAINER_BYTES = 3
_ELEMENT_BYTES = 1


def _number_size(text: str) -> int:
    """About 1 byte per two significant digits, plus 1 (leading and trailing zeroes trimmed)."""
    digits = text.lstrip("-+").split("e")[0].split("E")[0].replace(".", "").strip("0")
    return (max(len(digits), 1) + 1) // 2 + 1


def _binary_size(value: Any) -> int:
    if isinstance(value, bytes):
        return len(value)
    try:  # the wire (and moto's JSON) carries binary as base64
        return len(base64.b64decode(str(value), validate=True))
    except (binascii.Error, ValueError):
        return len(str(value).encode())


def value_size(value: Mapping[str, Any]) -> int:
    """The size DynamoDB counts for one typed value (``{"S": "..."}``, ``{"N": "1"}``...)."""
    kind, raw = next(iter(value.items()))
    if kind == "S":
        return len(str(raw).encode())
    if kind == "N":
        return _number_size(str(raw))
    if kind == "B":
        return _binary_size(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode()) for v in raw)
    if kind == "NS":
        return sum(_number_size(str(v)) for v in raw)
    if kind == "BS":
        return sum(_binary_size(v) for v in raw)
    if kind == "L":
        return _CONTAINER_BYTES + sum(_ELEMENT_BYTES + value_size(v) for v in raw)
    if kind == "M":
        return _CONTAINER_BYTES + sum(
            _ELEMENT_BYTES + len(k.encode()) + value_size(v) for k, v in raw.items()
        )
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """An item's size as DynamoDB bills it: each attribute's name (UTF-8) plus its value; 0 for
    no item."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def _units(size: int, unit_bytes: int) -> int:
    return max(1, math.ceil(size / unit_bytes))


def write_units(size_before: int, size_after: int, *, transactional: bool) -> int:
    """WRU of one write (put, update, delete, or a transaction's condition check): the larger of
    the item's size before and after, per KB rounded up (at least 1), twice in a transaction.
    A conditional write that fails costs the same (its item is unchanged: before = after)."""
    return _units(max(size_before, size_after), p.DYNAMODB_WRITE_UNIT_BYTES) * (2 if transactional else 1)


class Consistency(StrEnum):
    EVENTUAL = "eventual"
    STRONG = "strong"
    TRANSACTIONAL = "transactional"


_READ_FACTOR = {Consistency.EVENTUAL: 0.5, Consistency.STRONG: 1.0, Consistency.TRANSACTIONAL: 2.0}


def read_units(size: int, consistency: Consistency) -> float:
    """RRU of reading ``size`` bytes at once (one item; or all a Query read, rounded once): per
    4 KB rounded up (at least 1), half for an eventually consistent read, twice in a transaction."""
    return _units(size, p.DYNAMODB_READ_UNIT_BYTES) * _READ_FACTOR[consistency]


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index as the billing rules need it."""

    name: str
    keys: tuple[str, ...]  # its partition (and sort) key attributes
    table_keys: tuple[str, ...]  # the table's key attributes (always projected)
    projection: str  # "ALL", "KEYS_ONLY" or "INCLUDE"
    included: tuple[str, ...] = ()

    def holds(self, item: Mapping[str, Any] | None) -> bool:
        """Whether the item appears in the index (sparse: only with every index key)."""
        return bool(item) and all(key in item for key in self.keys)  # type: ignore[operator]

    def projected(self, item: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
        if self.projection == "ALL":
            return dict(item)
        kept = {*self.keys, *self.table_keys, *self.included}
        return {name: value for name, value in item.items() if name in kept}


def index_write_units(
    index: IndexSpec,
    before: Mapping[str, Mapping[str, Any]] | None,
    after: Mapping[str, Mapping[str, Any]] | None,
) -> int:
    """WRU a table write costs in one GSI: a put of the new entry when the item enters the index
    or its projection changes; a delete when it leaves; both when an index key changes; none
    when the index does not hold it, or holds it unchanged. Each by its projected size."""
    was, now = index.holds(before), index.holds(after)
    if not was and not now:
        return 0
    if not now:
        assert before is not None
        return _units(item_size(index.projected(before)), p.DYNAMODB_WRITE_UNIT_BYTES)
    assert after is not None
    put = _units(item_size(index.projected(after)), p.DYNAMODB_WRITE_UNIT_BYTES)
    if not was:
        return put
    assert before is not None
    if any(before.get(key) != after.get(key) for key in index.keys):
        return put + _units(item_size(index.projected(before)), p.DYNAMODB_WRITE_UNIT_BYTES)
    return put if index.projected(before) != index.projected(after) else 0


# --- Lambda, X-Ray, SQS, API Gateway ---------------------------------------------------------


def gb_seconds(durations_seconds: Iterable[float], memory_mb: int) -> float:
    """Lambda's billed GB-seconds: each invocation's duration rounded up to the millisecond,
    times the configured memory."""
    billed_ms = sum(math.ceil(seconds * 1000) for seconds in durations_seconds)
    return billed_ms / 1000 * memory_mb / 1024


def xray_traces(invocations: float, seconds: float) -> float:
    """Traces active tracing records under the default rule (the first request each second, 5% of
    the rest) for ``invocations`` spread over ``seconds``."""
    reservoir = min(invocations, p.XRAY_RESERVOIR_PER_SECOND * seconds)
    return reservoir + p.XRAY_FIXED_RATE * (invocations - reservoir)


def chunks(payload_bytes: int, chunk_bytes: int) -> int:
    """Billed requests of one call carrying ``payload_bytes`` (SQS: 64 KB, HTTP API: 512 KB)."""
    return max(1, math.ceil(payload_bytes / chunk_bytes))


# --- usage and its price ---------------------------------------------------------------------

PRICES: dict[str, p.Price] = {
    "dynamodb_wru": p.DYNAMODB_WRITE_UNIT,
    "dynamodb_rru": p.DYNAMODB_READ_UNIT,
    "s3_write": p.S3_WRITE_REQUEST,
    "s3_read": p.S3_READ_REQUEST,
    "sqs_standard": p.SQS_STANDARD_REQUEST,
    "sqs_fifo": p.SQS_FIFO_REQUEST,
    "sfn_transition": p.SFN_STANDARD_TRANSITION,
    "lambda_gb_second": p.LAMBDA_ARM_GB_SECOND,
    "lambda_request": p.LAMBDA_REQUEST,
    "apigw_request": p.APIGW_HTTP_REQUEST,
    "logs_gb": p.LOGS_INGESTED_GB,
    "xray_trace": p.XRAY_TRACE,
    "kms_request": p.KMS_REQUEST,
    "secrets_request": p.SECRETS_REQUEST,
}


def provisioned_prices(utilization: float, table: Mapping[str, p.Price] = PRICES) -> dict[str, p.Price]:
    """``table`` with DynamoDB's request units priced as provisioned capacity used at
    ``utilization`` (0 to 1] of what is paid for: a unit-hour serves 3,600 units a second's
    worth at full use, so each unit used costs the hour's price over 3,600 x utilization."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization}")
    per_hour = SECONDS_PER_HOUR * utilization

    def used(hour: p.Price, unit: str) -> p.Price:
        return p.Price(hour.usd / per_hour, 1, unit, f"{hour.source}, at {utilization:.0%} utilization")

    return {
        **table,
        "dynamodb_wru": used(p.DYNAMODB_WRITE_CAPACITY_HOUR, "write unit (provisioned)"),
        "dynamodb_rru": used(p.DYNAMODB_READ_CAPACITY_HOUR, "read unit (provisioned)"),
    }


def provisioned_monthly_floor(minimum_units: tuple[int, int], targets: int) -> float:
    """USD a month that provisioned tables cost whatever the load: ``targets`` tables and
    indexes, each at its minimum (read, write) capacity, with target tracking's four alarms
    on each of its two scaled dimensions."""
    reads, writes = minimum_units
    capacity = (reads * p.DYNAMODB_READ_CAPACITY_HOUR.each + writes * p.DYNAMODB_WRITE_CAPACITY_HOUR.each) * (
        p.HOURS_PER_MONTH * targets
    )
    return capacity + 4 * 2 * targets * p.CLOUDWATCH_ALARM_MONTH.each


@dataclass(frozen=True)
class UsageLine:
    """``quantity`` billed units of ``price`` (a key of ``PRICES``) per request."""

    service: str
    component: str
    price: str
    quantity: float

    def to_json(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "component": self.component,
            "price": self.price,
            "quantity": self.quantity,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> UsageLine:
        return cls(
            str(value["service"]), str(value["component"]), str(value["price"]), float(value["quantity"])
        )


@dataclass(frozen=True)
class CostLine:
    service: str
    component: str
    units_per_million: float
    unit: str
    usd_per_million: float


@dataclass(frozen=True)
class CostBreakdown:
    lines: tuple[CostLine, ...]

    @property
    def total(self) -> float:
        return sum(line.usd_per_million for line in self.lines)

    def by_service(self) -> dict[str, float]:
        """USD per million requests per service, most expensive first."""
        out: dict[str, float] = {}
        for line in self.lines:
            out[line.service] = out.get(line.service, 0.0) + line.usd_per_million
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def dominant(self, count: int = 3) -> list[CostLine]:
        return sorted(self.lines, key=lambda line: -line.usd_per_million)[:count]


def price(usage: Sequence[UsageLine], table: Mapping[str, p.Price] = PRICES) -> CostBreakdown:
    """Dollars per million requests of each usage line (lines of the same service, component
    and price are summed)."""
    merged: dict[tuple[str, str, str], float] = {}
    for line in usage:
        key = (line.service, line.component, line.price)
        merged[key] = merged.get(key, 0.0) + line.quantity
    lines = [
        CostLine(
            service,
            component,
            quantity * REQUESTS_PER_MILLION,
            table[price_key].unit,
            quantity * REQUESTS_PER_MILLION * table[price_key].each,
        )
        for (service, component, price_key), quantity in merged.items()
    ]
    return CostBreakdown(tuple(sorted(lines, key=lambda line: (line.service, -line.usd_per_million))))
