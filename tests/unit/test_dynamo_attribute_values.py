"""The storage kernel's own DynamoDB (de)serializer writes what boto3's ``TypeSerializer``
writes and reads back what it wrote, so that the gateway needs botocore only."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from batchgw.storage.dynamo import deserialize, from_item, serialize, to_item
from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer
from hypothesis import given
from hypothesis import strategies as st

_numbers = st.integers(min_value=-(10**37), max_value=10**37) | st.decimals(
    allow_nan=False, allow_infinity=False, places=6, min_value=-(10**20), max_value=10**20
)
_scalars = st.none() | st.booleans() | _numbers | st.text(max_size=20) | st.binary(max_size=20)
_sets = (
    st.frozensets(st.integers(min_value=-(10**9), max_value=10**9), min_size=1, max_size=4)
    | st.frozensets(st.text(max_size=8), min_size=1, max_size=4)
    | st.frozensets(st.binary(min_size=1, max_size=8), min_size=1, max_size=4)
)
_values = st.recursive(
    _scalars | _sets,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _plain(value: Any) -> Any:
    """boto3's deserialized value with its ``Binary`` wrappers as bytes."""
    if isinstance(value, Binary):
        return bytes(value.value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return {_plain(v) for v in value}
    return value


def _unordered(attribute: dict[str, Any]) -> Any:
    """A typed attribute with its sets' members in a comparable order (sets have none)."""
    ((kind, value),) = attribute.items()
    if kind in ("SS", "NS", "BS"):
        return kind, sorted(value)
    if kind == "M":
        return kind, {k: _unordered(v) for k, v in value.items()}
    if kind == "L":
        return kind, [_unordered(v) for v in value]
    return kind, value


@given(_values)
def test_a_value_serializes_as_boto3_serializes_it(value: Any) -> None:
    assert _unordered(serialize(value)) == _unordered(TypeSerializer().serialize(value))


@given(_values)
def test_a_serialized_value_reads_back_as_boto3_reads_it_with_binary_as_bytes(value: Any) -> None:
    attribute = TypeSerializer().serialize(value)

    assert deserialize(attribute) == _plain(TypeDeserializer().deserialize(attribute))


def test_an_item_round_trips_with_floats_stored_as_decimals_and_none_left_out() -> None:
    item = to_item({"pk": "b#1", "n": 3, "cost": 0.25, "blob": b"\x00\xff", "gone": None, "m": {"x": [1.5]}})

    assert "gone" not in item
    assert from_item(item) == {
        "pk": "b#1",
        "n": Decimal(3),
        "cost": Decimal("0.25"),
        "blob": b"\x00\xff",
        "m": {"x": [Decimal("1.5")]},
    }


@pytest.mark.parametrize(
    "value",
    [1.5, Decimal("Infinity"), Decimal("NaN"), Decimal("1" * 39), object()],
    ids=["float", "infinity", "nan", "39-digits", "object"],
)
def test_a_value_dynamodb_cannot_hold_exactly_is_refused(value: Any) -> None:
    with pytest.raises((TypeError, ArithmeticError)):  # decimal's Inexact and Rounded are ArithmeticErrors
        serialize(value)
