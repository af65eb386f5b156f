"""The local-only moto patches (``local.moto_patches``) keep moto's behaviour: DynamoDB
requests parsed from plain JSON give moto's parser's parameters exactly."""

from __future__ import annotations

from typing import Any

import botocore.session
from botocore.serialize import create_serializer
from hypothesis import given, settings
from hypothesis import strategies as st
from moto.core.responses import BaseResponse
from moto.dynamodb.responses import DynamoHandler

from local import moto_patches

_MODEL = botocore.session.Session().get_service_model("dynamodb")
_SERIALIZER = create_serializer("json")

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6)
scalars = st.one_of(
    st.builds(lambda s: {"S": s}, st.text(max_size=20)),
    st.builds(lambda n: {"N": str(n)}, st.integers(-(10**12), 10**12)),
    st.builds(lambda b: {"B": b}, st.binary(max_size=40)),
    st.builds(
        lambda b: {"BS": b}, st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=3, unique=True)
    ),
    st.builds(
        lambda s: {"SS": s}, st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=3, unique=True)
    ),
    st.builds(lambda b: {"BOOL": b}, st.booleans()),
    st.just({"NULL": True}),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.builds(lambda items: {"L": items}, st.lists(inner, max_size=3)),
        st.builds(
            lambda m: {"M": m}, st.dictionaries(names | st.sampled_from(["B", "BS", "S"]), inner, max_size=3)
        ),
    ),
    max_leaves=12,
)
items = st.dictionaries(names | st.sampled_from(["B", "BS", "M"]), values, min_size=1, max_size=5).map(
    lambda item: {**item, "pk": {"S": "batch_1"}}
)


def _request(operation: str, params: dict[str, Any]) -> Any:
    serialized = _SERIALIZER.serialize_to_request(params, _MODEL.operation_model(operation))

    class Request:
        method = "POST"
        values: dict[str, Any] = {}
        headers = {**serialized["headers"], "X-Amz-Target": f"DynamoDB_20120810.{operation}"}
        data = serialized["body"]
        path = "/"
        content_type = serialized["headers"]["Content-Type"]

    return Request()


def _parsed(operation: str, params: dict[str, Any], parse: Any) -> Any:
    handler = DynamoHandler()
    request = _request(operation, params)
    handler.querystring = {}
    handler.headers = request.headers
    handler.uri_match = {}
    parse(handler, request)
    return handler.params


def _both(operation: str, params: dict[str, Any]) -> tuple[Any, Any]:
    return (
        _parsed(operation, params, BaseResponse.parse_parameters),
        _parsed(operation, params, moto_patches.parse_parameters),
    )


@settings(max_examples=150, deadline=None, derandomize=True)
@given(item=items)
def test_a_put_parses_as_moto_parses_it(item: dict[str, Any]) -> None:
    theirs, ours = _both(
        "PutItem", {"TableName": "t", "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}
    )
    assert ours == theirs


@settings(max_examples=100, deadline=None, derandomize=True)
@given(item=items, value=values)
def test_a_transaction_and_a_batch_write_parse_as_moto_parses_them(
    item: dict[str, Any], value: dict[str, Any]
) -> None:
    update = {
        "TableName": "t",
        "Key": {"pk": {"S": "batch_1"}},
        "UpdateExpression": "SET #a = :v",
        "ExpressionAttributeNames": {"#a": "a"},
        "ExpressionAttributeValues": {":v": value},
    }
    transaction = {"TransactItems": [{"Put": {"TableName": "t", "Item": item}}, {"Update": update}]}
    theirs, ours = _both("TransactWriteItems", {**transaction, "ClientRequestToken": "x" * 36})
    assert ours == theirs
    theirs, ours = _both("BatchWriteItem", {"RequestItems": {"t": [{"PutRequest": {"Item": item}}]}})
    assert ours == theirs


def test_a_query_with_its_limits_and_start_key_parses_as_moto_parses_it() -> None:
    query = {
        "TableName": "t",
        "IndexName": "running",
        "KeyConditionExpression": "pk = :pk AND lease_until > :now",
        "ExpressionAttributeValues": {":pk": {"S": "batch_1"}, ":now": {"N": "1.5"}},
        "ExclusiveStartKey": {"pk": {"S": "batch_1"}, "idx": {"N": "7"}, "blob": {"B": b"\x00\xff"}},
        "Limit": 25,
        "ConsistentRead": True,
        "ScanIndexForward": False,
    }
    theirs, ours = _both("Query", query)
    assert ours == theirs


def test_an_update_expression_is_parsed_once_and_its_tree_never_changed_by_use(aws_env: None) -> None:
    from batchgw.storage import aws
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]

    moto_patches.apply()
    expression = "SET #a = :v ADD n :one REMOVE gone"
    assert UpdateExpressionParser.make(expression) is UpdateExpressionParser.make(expression)
    client = aws.get_clients().dynamodb
    client.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName="t", Item={"pk": {"S": "k"}, "gone": {"S": "x"}})
    for value in ("first", "second"):
        client.update_item(
            TableName="t",
            Key={"pk": {"S": "k"}},
            UpdateExpression=expression,
            ExpressionAttributeNames={"#a": "a"},
            ExpressionAttributeValues={":v": {"S": value}, ":one": {"N": "1"}},
        )
    item = client.get_item(TableName="t", Key={"pk": {"S": "k"}}, ConsistentRead=True)["Item"]
    assert item == {"pk": {"S": "k"}, "a": {"S": "second"}, "n": {"N": "2"}}
