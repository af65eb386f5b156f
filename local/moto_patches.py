"""Changes to moto 5.2.5's DynamoDB (local only): one fix that the gateway's invariants rely
on (1), and changes that keep moto's behaviour while costing it less CPU (2 to 13); and one
fix to its S3 (14).

1. Atomic requests. moto's server answers requests on many threads, and its DynamoDB
   evaluates a condition and then writes without a lock, so two conditional writes racing
   for one item could both succeed — which DynamoDB never allows. Every DynamoDB request
   here runs under one lock, as DynamoDB's per-item serialization would have it.
2. Cheap transactions. moto backs up every table a TransactWriteItems touches with a
   deep copy of the whole table (and iterates it while other threads write). That costs
   time in proportion to everything ever stored. Here only the items the transaction
   touches are saved, and restored if it is cancelled.
3. Plain request parsing. moto parses every request body against the service's model,
   shape by shape in Python (~3 ms for a batch write of 25 requests' items, a fifth of a
   call's time in the moto process). DynamoDB's JSON protocol sends its parameters as
   they are, but for binary values, base64 in JSON: here the body is ``json.loads``-ed and
   those values decoded, giving what moto's parser gives
   (``tests/integration/test_moto_patches.py`` holds the two to the same parameters).
4. Parsed update expressions kept. moto tokenizes and parses an UpdateExpression two or
   three times per write (to check its placeholders, then to apply it), though the
   gateway sends a few dozen distinct ones; here each string's tree is parsed once (moto
   reads the tree, and deep-copies it before the validator rewrites it).
5. Update trees copied by their shape. That deep copy (``copy.deepcopy`` of a tree whose
   nodes point at their parents) was an eighth of the moto process's time under the
   bench; here a tree's nodes are copied one by one, parents linked into the copy,
   string and number leaves shared (nothing rewrites them), anything else deep-copied.
6. A transaction's conditions checked once. The transaction above checks each write's
   condition, then moto's write checked it again (parsing it again); under the one lock
   nothing changes between the two, so the write is made without the second check.
7. Plain JSON answers for the item operations. moto serializes every answer against the
   service's output shape, attribute by attribute in Python (another eighth of its time).
   The item operations' results are already in DynamoDB's wire shape; here they are
   ``json.dumps``-ed, binary values base64-encoded, members with no value or outside the
   output shape left out, as moto's serializer does
   (``tests/integration/test_moto_patches.py`` holds the two to the same answers).
8. Projections by name. moto projects an item (a read's ProjectionExpression) by turning
   the whole item into plain Python values once per projected name, picking the name, and
   serializing the result back: a page of 1,000 results cost its Query about half a
   second. When every projected path is a top-level name, the named attributes are
   copied as they are; nested paths and list elements still take moto's way (the test
   holds the two to the same items).
9. An item's size checked once. moto builds each item it stores attribute by attribute,
   summing the sizes of all the attributes so far at each one (quadratic in the item's
   attributes) to refuse one over 400 KB. Here the item is built, then its size summed
   once: the same total, so the same items are refused.
10. Update trees walked with the types known. moto's validator walks each update's tree
   ten times (once per check or rewrite), asking at every node whether it is a node and
   which step handles it: ``isinstance`` against moto's abstract node classes, which
   Python answers slowly, and the tuple of handled classes built afresh at each node.
   Here each walk answers those per node type, once (moto registers no virtual node
   classes, so a node type's classes are its MRO); the walk, its order and what each step
   does to the tree are moto's (the test holds the two to the same trees and items).
11. An update's expression-only checks passed once. Three of those ten walks check what
   depends on the expression alone (one clause of each kind, no path set twice, no key
   attribute set): on the same kept tree (4), with the same attribute names and the same
   table keys, they pass again. Once an update has passed them with that tree, names and
   keys, later updates skip those three walks; anything else is checked as moto checks it
   (a test holds the outcomes to moto's, names changed included).

12. Parsed conditions kept. moto lexes and parses a ConditionExpression (or a filter)
   each time it meets one, twice for a conditional write (once to check its names, once to
   evaluate it): a fifth of the moto process's time under the bench. The gateway sends a
   few dozen distinct conditions, with values that change every time (owners, epochs,
   times), and moto's parse reads the values only to put them in the tree's leaves. Here a
   condition is parsed once per expression and attribute names, with markers in place of
   its values; each use gets a copy of that tree with its own values in the markers'
   places, and the names and values moto found (a failed parse is moto's, and is not
   kept; the test holds outcomes, errors included, to moto's).

13. A query on a table's own key reads its partition. moto's Query gathers its candidates
   from every item of the table (``Table.all_items``, sorted), then keeps those of the
   partition asked for: a query costs time in proportion to everything the table holds, so
   the control table's many small partitions (each user's spend, the model slots, the
   settings), read on every request, slowed as a request log grew beside them. Here a query
   without an index sees its partition's items alone; what it does with them is moto's (the
   test holds the two to the same answers).
14. A copy's checksum is the copy's. Real S3's CopyObject (a single request, so the copy is
   one object, not parts) copies the source's checksum with its type by default: a multipart
   source's COMPOSITE value (the CRC32 of its parts' CRC32s) stays COMPOSITE and reads back
   as ``<value>-<parts>`` with ``x-amz-checksum-type: COMPOSITE``, which SDKs do not check
   against the body; with ``x-amz-checksum-algorithm`` S3 computes the copy's own checksum,
   a FULL_OBJECT one over its bytes. moto 5.2.5 copies the source's value but not its type
   or part count, so a copy of a multipart object (any s3transfer upload over 8 MiB) answered
   GET with the composite value as if it were the whole object's CRC32, and botocore (1.36
   on, which checks a GET's checksum by default) failed every read of it with
   ``FlexibleChecksumError``; and a copy that asked for an algorithm kept the source's
   type. Here a copy keeps the source's type and part count, and one that names an
   algorithm is FULL_OBJECT.
``apply()`` is idempotent; the moto server process and the in-process test fixtures call it.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import threading
from typing import Any, cast

from botocore.model import OperationModel
from moto.core.responses import ActionContext
from moto.core.serialize import BaseJSONSerializer
from moto.dynamodb.comparisons import (
    AttributeValue,
    ConditionExpressionParser,
    Func,
    Op,
    Operand,
    get_filter_expression,
)
from moto.dynamodb.exceptions import (
    ConditionalCheckFailed,
    ItemSizeTooLarge,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import bytesize
from moto.dynamodb.parsing import validators
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]
    DepthFirstTraverser,
    Expression,
    Node,
    UpdateExpressionFunction,
)
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import (
    ActionCountValidator,
    OverlappingPathsValidator,
    UpdateExpressionValidator,
    UpdateHashRangeKeyValidator,
)
from moto.dynamodb.responses import DynamoHandler, DynamoResult
from moto.s3.models import FakeKey, S3Backend
from moto.s3.responses import S3Response

# moto's own: patches 8 and 11 fall back on or wrap them, and the tests hold patches 8 to 11 to them
MOTOS_PROJECT = Item.project
MOTOS_ITEM_INIT = Item.__init__
MOTOS_TRAVERSE = DepthFirstTraverser.traverse
MOTOS_FIND_CLAUSES = Node.find_clauses
MOTOS_VALIDATOR_INIT = UpdateExpressionValidator.__init__
MOTOS_VALIDATE = UpdateExpressionValidator.validate
MOTOS_CONDITION_PARSE = ConditionExpressionParser.parse
MOTOS_QUERY = Table.query
MOTOS_S3_COPY = S3Backend.copy_object
MOTOS_S3_COPY_REQUEST = S3Response.copy_object
ITEM_SIZE_LIMIT = 405000  # moto's (``LimitedSizeDict``): DynamoDB's 400 KB, as measured
_LOCK = threading.RLock()
_EXPRESSIONS_KEPT = 1024
_applied = False


def apply() -> None:
    global _applied
    if _applied:
        return
    _applied = True
    original_call_action = DynamoHandler.call_action

    def call_action(self: DynamoHandler) -> Any:
        with _LOCK:
            return original_call_action(self)

    DynamoHandler.call_action = call_action  # type: ignore[method-assign]
    DynamoDBBackend.transact_write_items = _transact_write_items  # type: ignore[method-assign]
    Table.query = partition_query  # type: ignore[method-assign]
    DynamoHandler.parse_parameters = parse_parameters  # type: ignore[method-assign,assignment]
    UpdateExpressionParser.make = staticmethod(  # type: ignore[method-assign,assignment]
        functools.lru_cache(maxsize=_EXPRESSIONS_KEPT)(UpdateExpressionParser.make)
    )
    validators.deepcopy = copy_for_validator  # type: ignore[assignment]
    original_execute_result = DynamoResult.execute_result

    def execute_result(self: DynamoResult, context: ActionContext) -> Any:
        operation = context.operation_model
        if operation.name not in PLAIN_ANSWERS:
            return original_execute_result(self, context)
        return plain_answer(cast(dict[str, Any], self.result), _answer_members(operation))

    DynamoResult.execute_result = execute_result  # type: ignore[method-assign,assignment]

    def project(self: Item, projection_expressions: list[list[str]]) -> Item:
        names = top_level_names(projection_expressions)
        if names is None:
            return MOTOS_PROJECT(self, projection_expressions)
        return projected_by_name(self, names)

    Item.project = project  # type: ignore[method-assign]
    Item.__init__ = item_init  # type: ignore[method-assign]
    DepthFirstTraverser.traverse = traverse
    Node.find_clauses = find_clauses
    UpdateExpressionValidator.__init__ = validator_init  # type: ignore[method-assign]
    UpdateExpressionValidator.validate = validate  # type: ignore[method-assign]
    ConditionExpressionParser.parse = parse_condition  # type: ignore[method-assign]
    S3Backend.copy_object = copy_keeping_checksum  # type: ignore[method-assign]
    S3Response.copy_object = copy_request  # type: ignore[method-assign]


def parse_parameters(self: DynamoHandler, request: Any) -> None:
    """What moto's model-driven parser makes of a DynamoDB request (its parameters, binary
    values as bytes), from ``json.loads``."""
    body = request.data
    self.params = with_binary_decoded(json.loads(body)) if body else {}


def with_binary_decoded(value: Any) -> Any:
    """``value`` (parsed DynamoDB JSON) with each binary attribute value (``{"B": base64}``,
    ``{"BS": [base64, ...]}``) decoded to bytes, in place. A one-key dict whose value is a
    string or a list of strings under ``B``/``BS`` can only be such a value: a map or an
    item naming an attribute ``B`` holds an attribute value (a dict) under it."""
    if isinstance(value, dict):
        if len(value) == 1:
            kind, raw = next(iter(value.items()))
            if kind == "B" and isinstance(raw, str):
                return {"B": base64.b64decode(raw)}
            if kind == "BS" and isinstance(raw, list) and all(isinstance(v, str) for v in raw):
                return {"BS": [base64.b64decode(v) for v in raw]}
        for key, inner in value.items():
            if isinstance(inner, dict | list):
                value[key] = with_binary_decoded(inner)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            if isinstance(inner, dict | list):
                value[i] = with_binary_decoded(inner)
    return value


def _transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    saved: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    seen: set[tuple[str, str]] = set()
    errors: list[tuple[str | None, str | None, dict[str, Any] | None]] = []

    def restore() -> None:
        for table_name, key, attributes in reversed(saved):
            if attributes is None:
                if self.get_item(table_name, key) is not None:
                    self.delete_item(table_name, key)
            else:
                self.put_item(table_name, attributes)

    for entry in transact_items:
        if len(entry) > 1:
            raise TransactWriteSingleOpException
        original: dict[str, Any] | None = None
        try:
            op_type, op = next(iter(entry.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table_name = op["TableName"]
            if op_type == "Put":
                table = self.get_table(table_name)
                attrs = op["Item"]
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]
            marker = (str(table_name), str(dict(sorted(key.items()))))
            if marker in seen:
                raise MultipleTransactionsException()
            seen.add(marker)

            current = self.get_item(table_name, key)
            condition = op.get("ConditionExpression")
            names = op.get("ExpressionAttributeNames")
            values = op.get("ExpressionAttributeValues")
            if condition is not None:
                check = get_filter_expression(condition, names, values)
                if not check.expr(current):
                    if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                        original = current.to_json()["Attributes"]
                    raise ConditionalCheckFailed(item=original)
            if op_type != "ConditionCheck":
                saved.append((table_name, key, current.to_json()["Attributes"] if current else None))
            # The condition held just now, under the lock: the write need not check it again.
            if op_type == "Put":
                self.put_item(table_name, op["Item"])
            elif op_type == "Delete":
                self.delete_item(table_name, key)
            elif op_type == "Update":
                self.update_item(
                    table_name,
                    key,
                    update_expression=op["UpdateExpression"],
                    expression_attribute_names=names,
                    expression_attribute_values=values,
                )
            errors.append((None, None, None))
        except (MultipleTransactionsException, MockValidationException):
            restore()
            raise
        except ConditionalCheckFailed as exc:
            errors.append(("ConditionalCheckFailed", str(exc.message), original))
        except Exception as exc:  # moto reports any other failure as a cancellation reason
            errors.append((type(exc).__name__, str(exc), original))
    if any(code is not None for code, _, _ in errors):
        restore()
        raise TransactionCanceledException(errors)


def _checked_attrs(attrs: dict[str, DynamoType]) -> LimitedSizeDict:
    """An item's attributes whose size was checked already, as moto's ``Item.__deepcopy__``
    builds them: without ``LimitedSizeDict``'s check at each attribute."""
    checked = LimitedSizeDict.__new__(LimitedSizeDict)
    dict.update(checked, attrs)
    return checked


def item_init(self: Item, hash_key: DynamoType, range_key: DynamoType | None, attrs: dict[str, Any]) -> None:
    """moto's ``Item.__init__`` with the item's size summed once, not once per attribute."""
    self.hash_key = hash_key
    self.range_key = range_key
    converted = {key: DynamoType(value) for key, value in attrs.items()}
    if sum(bytesize(key) + value.size() for key, value in converted.items()) > ITEM_SIZE_LIMIT:
        raise ItemSizeTooLarge
    self.attrs = _checked_attrs(converted)


_SUBCLASS: dict[tuple[type, Any], bool] = {}
_HANDLER: dict[tuple[type, tuple[type, ...]], int | None] = {}


def _is_a(kind: type, classes: type | tuple[type, ...]) -> bool:
    """``issubclass(kind, classes)``, answered once per pair: for moto's abstract node
    classes Python answers it slowly, and no virtual subclass is ever registered."""
    key = (kind, classes)
    if key not in _SUBCLASS:
        _SUBCLASS[key] = issubclass(kind, classes)
    return _SUBCLASS[key]


def _handler(kind: type, classes: tuple[type, ...]) -> int | None:
    """The position of the first of ``classes`` that ``kind`` is a subclass of, once per pair."""
    key = (kind, classes)
    if key not in _HANDLER:
        _HANDLER[key] = next((i for i, cls in enumerate(classes) if issubclass(kind, cls)), None)
    return _HANDLER[key]


def traverse(self: Any, node: Any) -> Any:
    """moto's ``DepthFirstTraverser.traverse``: depth first, each node after its children,
    a node of a handled class replaced by what its handler (the first whose class it is an
    instance of, in the map's order) returns, under the same parent."""
    handlers = self._processing_map()
    classes, handles = tuple(handlers), tuple(handlers.values())

    def walk(node: Any, child_id: int) -> Any:
        if not _is_a(type(node), Node):
            return node
        parent_node = node.parent
        if node.children is not None:
            for i, child_node in enumerate(node.children):
                self.pre_processing_of_child(node, i)
                walk(child_node, i)
        position = _handler(type(node), classes)
        if position is not None:
            node = handles[position](node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node

    return walk(node, -1)


def find_clauses(self: Any, clause_types: Any) -> list[Any]:
    """moto's ``Node.find_clauses`` (the clauses of those types below this node, in order),
    with the node classes it descends through checked once per type."""
    clauses: list[Any] = []
    for child in self.children or []:
        kind = type(child)
        if kind in clause_types:
            clauses.append(child)
        elif _is_a(kind, (Expression, UpdateExpressionFunction)):
            clauses.extend(child.find_clauses(clause_types))
    return clauses


_EXPRESSION_ONLY = (ActionCountValidator, OverlappingPathsValidator, UpdateHashRangeKeyValidator)
_CHECKS_KEPT = 4096
# id of a kept update tree -> (the tree, the (names, table keys) it passed the checks with);
# holding the tree keeps its id from being reused by another.
_PASSED: dict[int, tuple[Any, set[tuple[Any, ...]]]] = {}


def validator_init(
    self: Any,
    expression: Any,
    expression_attribute_names: dict[str, str] | None,
    expression_attribute_values: dict[str, Any],
    item: Item,
    table: Any,
) -> None:
    """moto's validator, without the expression-only checks when this tree passed them with
    the same names and table keys; else with them, noting what to record once they pass."""
    # moto's own calls pass the names a request gave, which may be none (patch 6 passes them so)
    given = cast(dict[str, str], expression_attribute_names)
    MOTOS_VALIDATOR_INIT(self, expression, given, expression_attribute_values, item, table)
    names = None if expression_attribute_names is None else frozenset(expression_attribute_names.items())
    context = (names, tuple(table.table_key_attrs))
    passed = _PASSED.get(id(expression))
    if passed is not None and passed[0] is expression and context in passed[1]:
        self.processors = [p for p in self.processors if not isinstance(p, _EXPRESSION_ONLY)]
        self.checks_to_record = None
    else:
        self.checks_to_record = (expression, context)


def validate(self: Any) -> Any:
    """moto's ``validate``; when it passed every check, its tree, names and keys are noted."""
    validated = MOTOS_VALIDATE(self)
    record = self.checks_to_record
    if record is not None:
        expression, context = record
        if len(_PASSED) >= _CHECKS_KEPT:
            _PASSED.clear()
        _PASSED.setdefault(id(expression), (expression, set()))[1].add(context)
    return validated


def top_level_names(paths: list[list[str]]) -> list[str] | None:
    """The attribute names a projection names, when each of its paths is one top-level name
    (no nested path, no list element); else None."""
    if all(len(path) == 1 and "[" not in path[0] for path in paths):
        return [path[0] for path in paths]
    return None


def projected_by_name(item: Item, names: list[str]) -> Item:
    """``item`` with only the attributes ``names`` names, in their order, each copied: what
    moto's ``Item.project`` makes of top-level names, without turning the whole item into
    plain values and back once per name. Built as moto's ``Item.__deepcopy__`` builds its
    copies (the attributes' sizes were checked when the item was written)."""
    attrs = _checked_attrs({name: copy.deepcopy(item.attrs[name]) for name in names if name in item.attrs})
    projected = cast(Item, Item.__new__(Item))
    projected.hash_key = item.hash_key
    projected.range_key = item.range_key
    projected.attrs = attrs
    return projected


_SHARED_LEAVES = (str, int, float, bool, type(None))


def copy_for_validator(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """What moto's update validator gets for ``copy.deepcopy(value)``: the root of a parsed
    tree is copied node by node (``_copy_tree``), anything else by ``copy.deepcopy``."""
    if isinstance(value, Node) and value.parent is None:
        return _copy_tree(value, None)
    return copy.deepcopy(value, memo)


def _copy_tree(node: Any, parent: Any) -> Any:
    copied = object.__new__(type(node))
    for name, value in node.__dict__.items():
        if name == "parent":
            copied.parent = parent
        elif name == "children" and value is not None:
            copied.children = [  # leaves first: a check against Node (an ABC) is slow
                child
                if isinstance(child, _SHARED_LEAVES)
                else _copy_tree(child, copied)
                if isinstance(child, Node)
                else copy.deepcopy(child)
                for child in value
            ]
        else:
            copied.__dict__[name] = value if isinstance(value, _SHARED_LEAVES) else copy.deepcopy(value)
    return copied


# The operations whose answers are items, counts and keys: plain JSON (patch 7). (Batch and
# transactional writes answer through moto's other result class, untouched.)
PLAIN_ANSWERS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "TransactGetItems",
    }
)
_JSON_1_0 = BaseJSONSerializer.APPLICATION_AMZ_JSON.format(version="1.0")


@functools.lru_cache(maxsize=len(PLAIN_ANSWERS))
def _answer_members(operation: OperationModel) -> frozenset[str]:
    return frozenset(operation.output_shape.members)


def plain_answer(result: dict[str, Any], members: frozenset[str]) -> tuple[int, dict[str, str], str]:
    """A DynamoDB item operation's answer (status, headers, body) from moto's result: its
    members of the operation's output shape (moto's results hold others, such as a delete's
    ``ConsumedCapacityUnits``, that its serializer leaves out)."""
    answer = _wire({name: value for name, value in result.items() if name in members})
    return 200, {"Content-Type": _JSON_1_0}, json.dumps(answer)


def _wire(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _wire(inner) for key, inner in value.items() if inner is not None}
    if isinstance(value, list):
        return [_wire(inner) for inner in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value  # no item operation answers a timestamp: json.dumps would refuse one


# Parsed conditions (patch 12): by expression and attribute names, the tree with markers in
# place of values, and the names and values moto's parse found in it.
_VALUE_MARKER = "batchgw:value"
_conditions: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, list[str], list[str]]] = {}


def parse_condition(self: ConditionExpressionParser) -> Any:
    """``ConditionExpressionParser.parse``, from a kept parse of the same expression and
    names, with this parser's values in its markers' places."""
    expression, names = self.condition_expression, self.expression_attribute_names or {}
    if not expression:
        return MOTOS_CONDITION_PARSE(self)
    values = self.expression_attribute_values
    key = (expression, tuple(sorted(names.items())))
    kept = _conditions.get(key)
    if kept is None:
        markers = None if values is None else {name: {_VALUE_MARKER: name} for name in values}
        probe = ConditionExpressionParser(expression, self.expression_attribute_names, markers)
        kept = (MOTOS_CONDITION_PARSE(probe), probe.expr_attr_names_found, probe.expr_attr_values_found)
        if len(_conditions) >= _EXPRESSIONS_KEPT:
            _conditions.clear()
        _conditions[key] = kept
    tree, names_found, values_found = kept
    if values_found and (values is None or any(name not in values for name in values_found)):
        return MOTOS_CONDITION_PARSE(self)  # a value missing: moto's own error
    bound = _bound(tree, values or {})
    self.expr_attr_names_found.extend(names_found)
    self.expr_attr_values_found.extend(values_found)
    return bound


def _bound(node: Any, values: dict[str, Any]) -> Any:
    """A copy of a kept condition's tree with ``values`` in its markers' places (an operator
    or function node copied, its other leaves shared: nothing changes them once parsed)."""
    if isinstance(node, AttributeValue):
        return AttributeValue(values[node.value]) if node.type == _VALUE_MARKER else node
    if not isinstance(node, Op | Func):
        return node
    copied = copy.copy(node)
    for name, value in vars(node).items():
        if isinstance(value, Op | Func | Operand):
            setattr(copied, name, _bound(value, values))
        elif isinstance(value, list | tuple):
            setattr(copied, name, type(value)(_bound(inner, values) for inner in value))
    return copied


# --- 13. a query reads its partition -------------------------------------------------------------


class _Partition:
    """A table as a query on its own key sees it: its items are the partition's alone;
    everything else is the table's."""

    def __init__(self, table: Table, hash_key: DynamoType) -> None:
        self._table = table
        self._hash_key = hash_key

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    def all_items(self) -> list[Item]:
        found = self._table.items.get(self._hash_key)
        if found is None:
            return []
        if isinstance(found, Item):
            return [found]
        return list(found.values())


def partition_query(
    self: Table,
    hash_key: DynamoType | None,
    range_comparison: str | None,
    range_objs: list[DynamoType],
    limit: int,
    exclusive_start_key: dict[str, Any],
    scan_index_forward: bool,
    projection_expressions: list[list[str]] | None,
    index_name: str | None = None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """moto's ``Table.query``; without an index, over the partition of ``hash_key`` alone."""
    seen: Any = self if index_name or hash_key is None else _Partition(self, hash_key)
    return MOTOS_QUERY(
        seen,
        hash_key,
        range_comparison,
        range_objs,
        limit,
        exclusive_start_key,
        scan_index_forward,
        projection_expressions,
        index_name,
        *args,
        **kwargs,
    )


# --- 14. a copy's checksum is the copy's -----------------------------------------------------------


def copy_keeping_checksum(
    self: S3Backend, src_key: FakeKey, dest_bucket_name: str, dest_key_name: str, *args: Any, **kwargs: Any
) -> None:
    """moto's copy, the source's checksum type and part count copied with its value (as S3
    copies a checksum: a composite one stays composite)."""
    MOTOS_S3_COPY(self, src_key, dest_bucket_name, dest_key_name, *args, **kwargs)
    if src_key.checksum_value:
        copied = cast(FakeKey, self.get_object(dest_bucket_name, dest_key_name))
        copied.checksum_type = src_key.checksum_type
        copied.checksum_parts = src_key.checksum_parts


def copy_request(self: S3Response) -> Any:
    """moto's CopyObject; one that names a checksum algorithm gets the copy's own checksum
    over its bytes (moto computes it), so its type is FULL_OBJECT, not the source's."""
    answer = MOTOS_S3_COPY_REQUEST(self)
    if self.headers.get("x-amz-checksum-algorithm"):
        copied = cast(FakeKey, self.backend.get_object(self.bucket_name, self.parse_key_name()))
        copied.checksum_type = "FULL_OBJECT"
        copied.checksum_parts = None
    return answer
