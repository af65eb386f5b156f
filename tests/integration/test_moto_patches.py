"""The local-only moto patches (``local.moto_patches``) keep moto's behaviour: DynamoDB
requests parsed from plain JSON give moto's parser's parameters exactly, the trees the
update validator rewrites are copies as deep as moto's, and the plain JSON answers are
moto's serializer's, and items projected by name are moto's projections."""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.exceptions import ClientError
from botocore.serialize import create_serializer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.core.responses import ActionContext, ActionResult, BaseResponse
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, Node  # type: ignore[attr-defined]
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import UpdateExpressionValidator
from moto.dynamodb.responses import DynamoHandler, DynamoResult

from local import moto_patches
from tests.support import bare_table

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

    moto_patches.apply()
    expression = "SET #a = :v ADD n :one REMOVE gone"
    assert UpdateExpressionParser.make(expression) is UpdateExpressionParser.make(expression)
    client = bare_table(aws.get_clients().dynamodb, "t")
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


# Update expressions of the shapes the gateway writes (functions, arithmetic, nested paths,
# every clause).
EXPRESSIONS = [
    "SET #st = :running, lease_owner = :me, lease_until = :until, "
    "epoch = if_not_exists(epoch, :zero) + :one, attempts = if_not_exists(attempts, :zero) + :one",
    "SET #a = :v ADD n :one REMOVE gone, lease_owner",
    "SET l = list_append(if_not_exists(l, :empty), :v), m.#k[0].x = :v - :one",
    "ADD #left :m1, ok :one DELETE tags :v",
]


def _shape(node: Any, parent: Any, seen: set[int]) -> Any:
    """A tree as nested tuples, checking that each node's parent is the node above it."""
    if not isinstance(node, Node):
        return node
    assert node.parent is parent
    seen.add(id(node))
    fields = {name: value for name, value in vars(node).items() if name not in ("parent", "children")}
    children = [_shape(child, node, seen) for child in node.children or []]
    return (type(node).__name__, repr(fields), children)


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_a_tree_copied_for_the_update_validator_is_as_deep_as_motos_own_copy(expression: str) -> None:
    tree = UpdateExpressionParser.make(expression)
    original: set[int] = set()
    ours: set[int] = set()
    expected = _shape(copy.deepcopy(tree), None, set())
    assert _shape(moto_patches.copy_for_validator(tree), None, ours) == expected
    assert _shape(tree, None, original) == expected
    assert not ours & original  # no node shared with the kept tree


@pytest.fixture
def mocked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A DynamoDB client on moto's in-memory backend, patched."""
    moto_patches.apply()
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def both_answers(mocked: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, Any]]:
    """Every DynamoDB answer made while the test runs, as (operation, ours, moto's own)."""
    answers: list[tuple[str, Any, Any]] = []
    patched = DynamoResult.execute_result

    def both(self: DynamoResult, context: ActionContext) -> Any:
        ours = patched(self, context)
        answers.append((context.operation_model.name, ours, ActionResult.execute_result(self, context)))
        return ours

    monkeypatch.setattr(DynamoResult, "execute_result", both)
    return answers


def with_fixtures(examples: int) -> settings:
    """Hypothesis settings for a test with function-scoped fixtures (each example sets up
    what it needs on them)."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )


def _same(answers: list[tuple[str, Any, Any]]) -> set[str]:
    for operation, (status, headers, body), (their_status, their_headers, their_body) in answers:
        assert (operation, status, headers["Content-Type"]) == (
            operation,
            their_status,
            their_headers["Content-Type"],
        )
        assert json.loads(body) == json.loads(their_body), operation
    return {operation for operation, _, _ in answers}


# The fixture records answers; each example clears them first.
@with_fixtures(25)
@given(item=items, value=values)
def test_the_item_operations_answer_in_plain_json_what_motos_serializer_answers(
    both_answers: list[tuple[str, Any, Any]], item: dict[str, Any], value: dict[str, Any]
) -> None:
    both_answers.clear()
    table = f"t-{uuid.uuid4().hex}"  # one mock for every example
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(
        TableName=table,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    first = {**item, "sk": {"N": "1"}}
    key = {"pk": first["pk"], "sk": first["sk"]}
    client.put_item(TableName=table, Item=first, ReturnValues="ALL_OLD")
    client.put_item(TableName=table, Item={**first, "extra": value}, ReturnValues="ALL_OLD")
    client.get_item(TableName=table, Key=key, ConsistentRead=True)
    client.get_item(TableName=table, Key={**key, "sk": {"N": "9"}})
    client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET v = :v ADD n :one",
        ExpressionAttributeValues={":v": value, ":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    client.update_item(TableName=table, Key=key, UpdateExpression="REMOVE v", ReturnValues="UPDATED_OLD")
    client.batch_write_item(
        RequestItems={table: [{"PutRequest": {"Item": {**item, "sk": {"N": str(n)}}}} for n in (2, 3)]}
    )
    client.query(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": first["pk"]},
        Limit=2,
    )
    client.query(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": str(uuid.uuid4())}},
    )
    client.batch_get_item(RequestItems={table: {"Keys": [key, {**key, "sk": {"N": "3"}}]}})
    client.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": table,
                    "Key": key,
                    "UpdateExpression": "SET w = :v",
                    "ExpressionAttributeValues": {":v": value},
                }
            },
            {"Delete": {"TableName": table, "Key": {**key, "sk": {"N": "2"}}}},
        ]
    )
    client.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": key}}])
    client.scan(TableName=table)
    client.delete_item(TableName=table, Key=key, ReturnValues="ALL_OLD")
    assert _same(both_answers) >= moto_patches.PLAIN_ANSWERS


def _comparable(value: Any) -> Any:
    """An attribute value as JSON with its sets' members sorted (moto's projection rebuilds
    sets, in any order)."""
    if isinstance(value, dict):
        return {
            key: sorted(map(repr, inner)) if key in ("SS", "NS", "BS") else _comparable(inner)
            for key, inner in value.items()
        }
    if isinstance(value, list):
        return [_comparable(inner) for inner in value]
    return value


@settings(max_examples=150, deadline=None, derandomize=True)
@given(item=items, data=st.data())
def test_an_item_projected_by_name_is_motos_projection_of_it(
    item: dict[str, Any], data: st.DataObject
) -> None:
    stored = Item(DynamoType(item["pk"]), None, item)
    named = st.sampled_from([*(name for name in item if "[" not in name), "absent"])
    names = data.draw(st.lists(named, min_size=1, max_size=6))
    paths = [[name] for name in names]
    assert moto_patches.top_level_names(paths) == names
    ours = moto_patches.projected_by_name(stored, names)
    theirs = moto_patches.MOTOS_PROJECT(stored, paths)
    assert list(ours.attrs) == list(theirs.attrs)
    assert _comparable(ours.to_json()) == _comparable(theirs.to_json())
    assert (ours.hash_key, ours.range_key) == (theirs.hash_key, theirs.range_key)
    assert not _objects(ours.attrs) & _objects(stored.attrs)  # copies: nothing shared with the item


def _objects(value: Any) -> set[int]:
    """The ids of the attribute values and containers within ``value``."""
    found: set[int] = set()
    if isinstance(value, DynamoType):
        found.add(id(value))
        value = value.value
    if isinstance(value, dict | list):
        found.add(id(value))
        for inner in value.values() if isinstance(value, dict) else value:
            found |= _objects(inner)
    return found


def test_a_nested_path_or_a_list_element_is_projected_by_moto() -> None:
    assert moto_patches.top_level_names([["res"], ["m", "inner"]]) is None
    assert moto_patches.top_level_names([["res"], ["l[1]"]]) is None


@settings(max_examples=150, deadline=None, derandomize=True)
@given(item=items)
def test_an_item_built_with_its_size_summed_once_is_motos_item(item: dict[str, Any]) -> None:
    ours, theirs = Item.__new__(Item), Item.__new__(Item)
    moto_patches.item_init(ours, DynamoType(item["pk"]), None, item)
    moto_patches.MOTOS_ITEM_INIT(theirs, DynamoType(item["pk"]), None, item)
    assert ours == theirs
    assert type(ours.attrs) is type(theirs.attrs) and list(ours.attrs) == list(theirs.attrs)


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_an_item_is_refused_over_motos_size_limit_exactly_as_moto_refuses_it(extra: int) -> None:
    def item(size: int) -> dict[str, Any]:
        return {"pk": {"S": "batch_1"}, "b": {"S": "x" * size}}

    base = Item.__new__(Item)
    moto_patches.MOTOS_ITEM_INIT(base, DynamoType({"S": "batch_1"}), None, item(0))
    at_limit = moto_patches.ITEM_SIZE_LIMIT - base.size() + extra
    outcomes = []
    for init in (moto_patches.item_init, moto_patches.MOTOS_ITEM_INIT):
        try:
            init(Item.__new__(Item), DynamoType({"S": "batch_1"}), None, item(at_limit))
            outcomes.append("kept")
        except ItemSizeTooLarge:
            outcomes.append("refused")
    assert outcomes == ["refused" if extra > 0 else "kept"] * 2


# Updates that succeed and updates moto refuses (two sets of one path, two SET clauses, a key
# set, arithmetic on a value of any type): the walk must refuse what moto refuses, alike.
UPDATES = [
    *EXPRESSIONS,
    "SET a = :v, b = :one REMOVE c",
    "SET a = :v, a = :one",
    "SET a = :v SET b = :one",
    "SET pk = :v",
    "SET x = :v + :one",
    "SET x = :n + :one",
    "ADD n :v",
    "ADD n :n",
    "SET l = list_append(if_not_exists(l, :empty), :list), m.#k[0].x = :n - :one",
    "REMOVE m.#k[0].x, l[0]",
]
_FIXED = {
    ":running": {"S": "running"},
    ":me": {"S": "worker-1"},
    ":until": {"N": "1700000000"},
    ":zero": {"N": "0"},
    ":one": {"N": "1"},
    ":m1": {"N": "-1"},
    ":empty": {"L": []},
    ":n": {"N": "7"},
    ":list": {"L": [{"S": "second"}]},
    ":epoch": {"N": "3"},
    ":queued": {"S": "queued"},
    ":retry": {"S": "retry_wait"},
    ":now": {"N": "1700000001"},
    ":type": {"S": "N"},
}
_NAMES = {"#st": "status", "#a": "a", "#k": "k", "#left": "left"}
_KNOWN = {
    "m": {"M": {"k": {"L": [{"M": {"x": {"N": "1"}}}]}}},
    "l": {"L": [{"S": "first"}]},
    "tags": {"SS": ["a", "b"]},
    "n": {"N": "5"},
    "gone": {"S": "x"},
}


def _update(
    client: Any,
    table: str,
    expression: str,
    value: dict[str, Any],
    *,
    condition: str | None = None,
    given: dict[str, Any] | None = None,
) -> tuple[Any, ...]:
    """What moto makes of the update (on ``condition``): the item after it, or the error's
    code and message, or moto's own failure. Each value is ``given``'s, else a fixed one,
    else ``value``; ``:missing`` and ``#nope`` are never given."""
    placeholders = set(re.findall(r"[#:]\w+", f"{expression} {condition or ''}"))
    chosen = {**_FIXED, **(given or {})}
    params: dict[str, Any] = {}
    if values := {p: chosen.get(p, value) for p in placeholders if p[0] == ":" and p != ":missing"}:
        params["ExpressionAttributeValues"] = values
    if names := {p: _NAMES[p] for p in placeholders if p[0] == "#" and p != "#nope"}:
        params["ExpressionAttributeNames"] = names
    if condition is not None:
        params["ConditionExpression"] = condition
    try:
        client.update_item(
            TableName=table, Key={"pk": {"S": "batch_1"}}, UpdateExpression=expression, **params
        )
    except ClientError as exc:
        return ("refused", exc.response["Error"]["Code"], exc.response["Error"]["Message"])
    except (ValueError, KeyError) as exc:  # moto's own failures (size() of nothing, a value not given)
        return ("failed", type(exc).__name__, str(exc))
    return ("updated", client.get_item(TableName=table, Key={"pk": {"S": "batch_1"}})["Item"])


# Ours (patches 10 and 11) and moto's own walk and validator.
_WALKS = [
    (
        moto_patches.traverse,
        moto_patches.find_clauses,
        moto_patches.validator_init,
        moto_patches.validate,
    ),
    (
        moto_patches.MOTOS_TRAVERSE,
        moto_patches.MOTOS_FIND_CLAUSES,
        moto_patches.MOTOS_VALIDATOR_INIT,
        moto_patches.MOTOS_VALIDATE,
    ),
]


def _walk_with(monkeypatch: pytest.MonkeyPatch, versions: tuple[Any, ...]) -> None:
    walk, find, init, validate = versions
    monkeypatch.setattr(DepthFirstTraverser, "traverse", walk)
    monkeypatch.setattr(Node, "find_clauses", find)
    monkeypatch.setattr(UpdateExpressionValidator, "__init__", init)
    monkeypatch.setattr(UpdateExpressionValidator, "validate", validate)


def _table_with(client: Any, item: dict[str, Any]) -> str:
    table = f"t-{uuid.uuid4().hex}"
    client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName=table, Item=item)
    return table


# Each expression is met again in every example: from the second on, ours skips the checks it
# passed before.
@with_fixtures(40)
@given(item=items, value=values)
def test_an_update_walked_with_the_types_known_and_its_checks_kept_is_motos_update(
    mocked: Any, monkeypatch: pytest.MonkeyPatch, item: dict[str, Any], value: dict[str, Any]
) -> None:
    for expression in UPDATES:
        outcomes = []
        for versions in _WALKS:
            _walk_with(monkeypatch, versions)
            table = _table_with(mocked, {**item, **_KNOWN})
            outcomes.append(_update(mocked, table, expression, value))
        assert outcomes[0] == outcomes[1], expression


@pytest.mark.parametrize(
    ("passing", "refused"),
    [
        ({"#a": "x", "#b": "y"}, {"#a": "x", "#b": "x"}),  # then one path set twice
        ({"#a": "x", "#b": "y"}, {"#a": "pk", "#b": "y"}),  # then a key attribute set
    ],
)
def test_checks_kept_for_an_expression_are_made_again_for_other_names(
    mocked: Any, passing: dict[str, str], refused: dict[str, str]
) -> None:
    table = _table_with(mocked, {"pk": {"S": "batch_1"}})
    expression = "SET #a = :v, #b = :one"
    values = {":v": {"S": "v"}, ":one": {"N": "1"}}

    def update(names: dict[str, str]) -> None:
        mocked.update_item(
            TableName=table,
            Key={"pk": {"S": "batch_1"}},
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    update(passing)
    update(passing)  # the checks kept
    with pytest.raises(ClientError, match="ValidationException"):
        update(refused)


# Conditions as the gateway writes them, and others moto evaluates or refuses otherwise: a
# value or a name not given, a reserved word, a malformed one, and every function and form.
CONDITIONS = [
    "#st = :running AND lease_owner = :me AND epoch = :epoch",
    "(#st = :queued) OR (#st = :retry AND next_at <= :now) OR (#st = :running AND lease_until < :now)",
    "attribute_not_exists(pk)",
    "attribute_exists(pk) AND #left > :one",
    "attribute_not_exists(prep_until) OR prep_until < :now",
    "begins_with(#a, :v) OR contains(tags, :v) OR contains(l, :v)",
    "size(l) > :one AND attribute_type(n, :type)",
    "size(#a) <= :n",
    "n BETWEEN :zero AND :n",
    "n IN (:zero, :one, :v)",
    "NOT (n = :v) AND m.#k[0].x <> :v",
    "#a = :missing",
    "#nope = :v",
    "status = :v",
    "n = :v AND",
]


# A request running under a lease, as the conditions below read it.
_HELD = {"status": {"S": "running"}, "lease_owner": {"S": "worker-1"}, "epoch": {"N": "3"}}


def _under_both_parses(
    client: Any,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
    stored: dict[str, Any],
    condition: str,
    value: dict[str, Any],
    given: dict[str, Any] | None = None,
) -> list[tuple[Any, ...]]:
    """The conditional update's outcome on ``stored`` with our kept parse, then with moto's."""
    outcomes = []
    for parse in (moto_patches.parse_condition, moto_patches.MOTOS_CONDITION_PARSE):
        monkeypatch.setattr(ConditionExpressionParser, "parse", parse)
        client.put_item(TableName=table, Item=stored)
        outcomes.append(_update(client, table, "SET touched = :one", value, condition=condition, given=given))
    return outcomes


# Each condition is met again in every example: from the second on, ours binds a kept parse.
@with_fixtures(25)
@given(item=items, value=values)
def test_a_condition_parsed_once_and_kept_decides_as_motos_parse_decides(
    mocked: Any, monkeypatch: pytest.MonkeyPatch, item: dict[str, Any], value: dict[str, Any]
) -> None:
    stored = {**item, **_KNOWN, **_HELD}
    table = _table_with(mocked, stored)
    for condition in CONDITIONS:
        outcomes = _under_both_parses(mocked, monkeypatch, table, stored, condition, value)
        assert outcomes[0] == outcomes[1], condition


def test_a_kept_condition_decides_each_time_on_that_calls_values(
    mocked: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = {"pk": {"S": "batch_1"}, **_HELD, "lease_until": {"N": "100"}}
    table = _table_with(mocked, stored)
    condition = "#st = :running AND ((lease_owner = :me AND epoch = :epoch) OR lease_until < :now)"
    calls = [
        ("worker-1", "3", "50"),
        ("worker-2", "3", "50"),
        ("worker-1", "4", "50"),
        ("worker-2", "4", "150"),
    ]
    decided = []
    for me, epoch, now in [*calls, *calls]:
        given = {":me": {"S": me}, ":epoch": {"N": epoch}, ":now": {"N": now}}
        both = _under_both_parses(mocked, monkeypatch, table, stored, condition, {}, given)
        outcomes = [outcome[0] if outcome[0] == "updated" else outcome[1] for outcome in both]
        assert outcomes[0] == outcomes[1]
        decided.append(outcomes[0])
    refused = "ConditionalCheckFailedException"
    assert decided == ["updated", refused, refused, "updated"] * 2


# --- 13. a query reads its partition ---------------------------------------------------------


QUERIES: list[dict[str, Any]] = [
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "b"}}},
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "nobody"}}},
    {
        "KeyConditionExpression": "pk = :p AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {":p": {"S": "b"}, ":lo": {"S": "k03"}, ":hi": {"S": "k07"}},
        "ScanIndexForward": False,
    },
    {
        "KeyConditionExpression": "pk = :p AND begins_with(sk, :x)",
        "ExpressionAttributeValues": {":p": {"S": "a"}, ":x": {"S": "k1"}},
    },
    {
        "KeyConditionExpression": "pk = :p",
        "FilterExpression": "n > :three",
        "ProjectionExpression": "sk, n",
        "ExpressionAttributeValues": {":p": {"S": "c"}, ":three": {"N": "3"}},
        "Limit": 4,
    },
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "a"}}, "Limit": 3},
]


def test_a_query_over_its_partition_alone_answers_what_motos_query_over_every_item_answers(
    mocked: Any,
) -> None:
    mocked.create_table(
        TableName="parts",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for pk in "abc":
        for n in range(12):
            item = {"pk": {"S": pk}, "sk": {"S": f"k{n:02d}"}, "n": {"N": str(n)}}
            mocked.put_item(TableName="parts", Item=item)

    def pages(query: dict[str, Any]) -> list[Any]:
        answers, start = [], None
        while True:
            answer = mocked.query(
                TableName="parts", **query, **({"ExclusiveStartKey": start} if start else {})
            )
            answers.append((answer["Items"], answer["Count"], answer.get("LastEvaluatedKey")))
            start = answer.get("LastEvaluatedKey")
            if start is None:
                return answers

    patched = [pages(query) for query in QUERIES]
    assert moto_patches.Table.query is moto_patches.partition_query  # type: ignore[comparison-overlap]
    moto_patches.Table.query = moto_patches.MOTOS_QUERY  # type: ignore[method-assign]
    try:
        theirs = [pages(query) for query in QUERIES]
    finally:
        moto_patches.Table.query = moto_patches.partition_query  # type: ignore[method-assign]
    assert patched == theirs
    assert [len(p[0][0]) for p in patched] == [12, 0, 5, 2, 0, 3]  # a limit counts what a filter drops
