"""The local stack's denied partitions find a call's partition key wherever the call names it."""

from __future__ import annotations

from local.denials import denied_partitions, partition_of


def test_a_calls_partition_is_its_keys_its_items_or_what_its_query_compares_pk_with() -> None:
    assert partition_of({"Key": {"pk": {"S": "interactive"}, "sk": {"S": "x"}}}) == "interactive"
    assert partition_of({"Item": {"pk": {"S": "runtime"}}}) == "runtime"
    query = {"KeyConditionExpression": "pk = :pk", "ExpressionAttributeValues": {":pk": {"S": "interactive"}}}
    assert partition_of(query) == "interactive"
    named = {
        "KeyConditionExpression": "#p = :v AND begins_with(sk, :s)",
        "ExpressionAttributeNames": {"#p": "pk"},
        "ExpressionAttributeValues": {":v": {"S": "slots#m"}, ":s": {"S": "a"}},
    }
    assert partition_of(named) == "slots#m"
    assert (
        partition_of({"KeyConditionExpression": "sk = :s", "ExpressionAttributeValues": {":s": {"S": "a"}}})
        is None
    )
    assert partition_of({}) is None


def test_the_denied_partitions_are_read_from_the_environment() -> None:
    assert denied_partitions({"BATCHGW_DYNAMODB_DENY_PARTITIONS": " interactive, runtime ,"}) == {
        "interactive",
        "runtime",
    }
    assert denied_partitions({}) == frozenset()
