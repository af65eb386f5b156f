"""What a recorded run used, in billed units: moto's request recording replayed.

The cost run (``bench.cost``) starts the local stack with moto's recorder on
(``MOTO_ENABLE_RECORDING``): moto appends every request it serves, from the stack's first
CreateTable on, to one JSON-lines file (headers, URL, body). That is every AWS call of every
process, the pollers' and moto's Step Functions interpreter's Lambda invokes included.

DynamoDB is billed on item sizes, which a request alone does not tell (an update's item before
and after it), so the recording's DynamoDB requests are replayed, in order, on a fresh
in-process moto with the stack's patches: before and after each write the items it names are
read from moto's tables, and each read's items too. Other services are counted from the
requests themselves (SQS payload chunks, S3 request classes, KMS, Secrets Manager, Lambda
invokes).

``Window``s are line ranges of the recording; ``replay`` returns the usage (absolute, not per
request) of each window.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from batchgw.config import resources
from batchgw.storage.touches import partition_kind
from moto.core import responses as core_responses
from moto.dynamodb.models import dynamodb_backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

from bench import cost_model as m
from local import moto_patches, moto_server

_DYNAMODB_HOST = "dynamodb.us-east-1.amazonaws.com"
_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
_READS = frozenset({"GetItem", "BatchGetItem", "TransactGetItems", "Query", "Scan"})
_TARGET_SERVICES = {
    "DynamoDB_20120810": "dynamodb",
    "AmazonSQS": "sqs",
    "AWSStepFunctions": "sfn",
    "TrentService": "kms",
    "secretsmanager": "secretsmanager",
}


# --- the recording ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One recorded request: the service and operation it called, and what it carried."""

    line: int
    service: str  # dynamodb, sqs, sfn, kms, secretsmanager, s3, lambda, moto-api, other
    operation: str
    headers: Mapping[str, str]
    url: str
    method: str
    body: bytes

    def json(self) -> dict[str, Any]:
        return json.loads(self.body or b"{}")  # type: ignore[no-any-return]


def _header(headers: Mapping[str, str], name: str) -> str:
    lowered = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lowered), "")


def _signed_service(headers: Mapping[str, str], url: str) -> str:
    """The service a SigV4 signature names (header or presigned query string)."""
    credential = _header(headers, "Authorization").partition("Credential=")[2].split(",")[0]
    if not credential:
        credential = unquote(parse_qs(urlsplit(url).query).get("X-Amz-Credential", [""])[0])
    parts = credential.split("/")
    return parts[3] if len(parts) > 3 else ""


def _s3_operation(method: str, url: str, headers: Mapping[str, str]) -> str:
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    has_key = len([segment for segment in parts.path.split("/") if segment]) > 1
    if method == "PUT":
        if _header(headers, "x-amz-copy-source"):
            return "CopyObject"
        return "UploadPart" if "uploadId" in query else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        return "DeleteObjects" if "delete" in query else "PostObject"
    if method == "GET":
        return "GetObject" if has_key else "ListObjects"
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    return method


def classify(line: int, entry: Mapping[str, Any]) -> Request:
    headers = {str(k): str(v) for k, v in (entry.get("headers") or {}).items()}
    url, method = str(entry.get("url", "")), str(entry.get("method", ""))
    raw = entry.get("body") or ""
    body = base64.b64decode(raw) if entry.get("body_encoded") else str(raw).encode()
    path = urlsplit(url).path

    def request(service: str, operation: str) -> Request:
        return Request(line, service, operation, headers, url, method, body)

    target = _header(headers, "X-Amz-Target")
    if target:
        prefix, _, operation = target.partition(".")
        return request(_TARGET_SERVICES.get(prefix, prefix), operation)
    if path.startswith("/moto-api"):
        return request("moto-api", path)
    if path.startswith("/2015-03-31/functions/"):
        function = unquote(path.split("/")[3])
        return request("lambda", f"Invoke:{function}")
    service = _signed_service(headers, url)
    if service == "sqs":  # the query protocol
        action = parse_qs(body.decode(errors="replace")).get("Action", [""])[0]
        return request("sqs", action)
    if service == "s3":
        return request("s3", _s3_operation(method, url, headers))
    return request(service or "other", f"{method} {path}")


def read_recording(path: Path) -> tuple[list[Request], int]:
    """Every request recorded in ``path``, in order, and how many lines could not be read (two
    large requests recorded at once can interleave)."""
    requests, broken = [], 0
    with path.open() as lines:
        for number, line in enumerate(lines):
            try:
                requests.append(classify(number, json.loads(line)))
            except (ValueError, TypeError, KeyError):
                broken += 1
    return requests, broken


def count_lines(path: Path) -> int:
    """Lines recorded so far (a window's bound)."""
    if not path.exists():
        return 0
    with path.open("rb") as lines:
        return sum(1 for _ in lines)


# --- usage accumulated per window -------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    name: str
    first_line: int
    end_line: int  # exclusive

    def holds(self, line: int) -> bool:
        return self.first_line <= line < self.end_line


@dataclass
class Tally:
    """Billed units of one window, by (service, component, price)."""

    units: dict[tuple[str, str, str], float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)  # service.Operation -> requests
    # DynamoDB component -> the billed size of each item written or read (bytes)
    sizes: dict[str, list[int]] = field(default_factory=dict)

    def add(self, service: str, component: str, price: str, quantity: float, size: int | None = None) -> None:
        key = (service, component, price)
        self.units[key] = self.units.get(key, 0.0) + quantity
        if size is not None:
            self.sizes.setdefault(component, []).append(size)

    def lines(self, divisor: float = 1.0) -> list[m.UsageLine]:
        return [m.UsageLine(s, c, p, q / divisor) for (s, c, p), q in sorted(self.units.items())]


# --- DynamoDB, replayed -----------------------------------------------------------------------

Item = dict[str, Any]


@dataclass(frozen=True)
class TableShape:
    name: str
    keys: tuple[str, ...]
    indexes: dict[str, m.IndexSpec]

    @classmethod
    def from_create(cls, body: Mapping[str, Any]) -> TableShape:
        keys = tuple(k["AttributeName"] for k in body["KeySchema"])
        indexes = {}
        for index in body.get("GlobalSecondaryIndexes", []):
            projection = index.get("Projection", {})
            indexes[index["IndexName"]] = m.IndexSpec(
                name=index["IndexName"],
                keys=tuple(k["AttributeName"] for k in index["KeySchema"]),
                table_keys=keys,
                projection=projection.get("ProjectionType", "ALL"),
                included=tuple(projection.get("NonKeyAttributes", [])),
            )
        return cls(str(body["TableName"]), keys, indexes)

    def key_of(self, item: Mapping[str, Any]) -> Item:
        return {k: item[k] for k in self.keys}


def _kind(item_or_key: Mapping[str, Any]) -> str:
    return partition_kind(item_or_key.get("pk", next(iter(item_or_key.values()), "")))


class DynamoReplay:
    """A fresh in-process moto DynamoDB that the recorded requests are sent to, in order."""

    def __init__(self) -> None:
        moto_patches.apply()
        self._client = Client(DomainDispatcherApplication(create_backend_app))
        self.tables: dict[str, TableShape] = {}
        self._backends: dict[str, Any] = {}  # table name -> the moto backend holding it

    def send(self, request: Request, body: Mapping[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        headers["Host"] = _DYNAMODB_HOST
        data = request.body if body is None else json.dumps(body).encode()
        response = self._client.post("/", data=data, headers=headers)
        try:
            answer = json.loads(response.get_data() or b"{}")
        except ValueError:
            answer = {}
        return response.status_code, answer

    def item(self, table: str, key: Mapping[str, Any]) -> Item | None:
        """The item as the replay's moto holds it now (None when it does not exist)."""
        backend = self._backends.get(table)
        if backend is None:
            backend = next(
                (b for regions in dynamodb_backends.values() for b in regions.values() if table in b.tables),
                None,
            )
            if backend is None:
                return None
            self._backends[table] = backend
        found = backend.get_item(table, dict(key))
        return None if found is None else dict(found.to_json()["Attributes"])


@dataclass(frozen=True)
class _Write:
    part: str  # Put, Update, Delete, ConditionCheck
    table: str
    key: Item


def _writes(operation: str, body: Mapping[str, Any], tables: Mapping[str, TableShape]) -> Iterator[_Write]:
    def key(table: str, entry: Mapping[str, Any]) -> Item:
        return dict(entry["Key"]) if "Key" in entry else tables[table].key_of(entry["Item"])

    if operation == "TransactWriteItems":
        for entry in body["TransactItems"]:
            part, op = next(iter(entry.items()))
            yield _Write(part, op["TableName"], key(op["TableName"], op))
    elif operation == "BatchWriteItem":
        for table, requests in body["RequestItems"].items():
            for request in requests:
                part, op = next(iter(request.items()))
                yield _Write(part.removesuffix("Request"), table, key(table, op))
    else:
        table = body["TableName"]
        yield _Write(operation.removesuffix("Item"), table, key(table, body))


# Failed writes that consume capacity (the item is read to check); any other error (a
# validation error, say) consumes none.
_BILLED_FAILURES = {
    "ConditionalCheckFailedException": " (condition failed)",
    "TransactionCanceledException": " (cancelled)",
}


def _failure(status: int, answer: Mapping[str, Any]) -> str | None:
    """ "" when the write succeeded, a label when it failed but is billed, None when not billed."""
    if status < 400:
        return ""
    return _BILLED_FAILURES.get(str(answer.get("__type", "")).rpartition("#")[2])


def account_write(replay: DynamoReplay, request: Request, tally: Tally | None) -> None:
    body = request.json()
    transactional = request.operation == "TransactWriteItems"
    writes = list(_writes(request.operation, body, replay.tables))
    before = [replay.item(w.table, w.key) for w in writes]
    status, answer = replay.send(request)
    if tally is None:
        return
    failed = _failure(status, answer)
    if failed is None:
        tally.add("DynamoDB", f"{request.operation} refused (not billed)", "dynamodb_wru", 0)
        return
    for write, old in zip(writes, before, strict=True):  # moto leaves no UnprocessedItems
        new = replay.item(write.table, write.key)
        tx = " tx" if transactional else ""
        size = max(m.item_size(old), m.item_size(new))
        units = m.write_units(size, size, transactional=transactional)
        component = f"write {write.table} {_kind(write.key)} {write.part}{tx}{failed}"
        tally.add("DynamoDB", component, "dynamodb_wru", units, size)
        if failed:
            continue
        for index in replay.tables[write.table].indexes.values():
            index_units = m.index_write_units(index, old, new)
            if index_units:
                tally.add("DynamoDB", f"index write {write.table}/{index.name}", "dynamodb_wru", index_units)


def _consistency(body: Mapping[str, Any]) -> m.Consistency:
    return m.Consistency.STRONG if body.get("ConsistentRead") else m.Consistency.EVENTUAL


def account_read(replay: DynamoReplay, request: Request, tally: Tally | None) -> None:
    body = request.json()
    operation = request.operation
    if operation in ("GetItem", "TransactGetItems", "BatchGetItem"):
        if operation == "GetItem":
            gets = [(body["TableName"], body["Key"], _consistency(body))]
        elif operation == "TransactGetItems":
            gets = [
                (e["Get"]["TableName"], e["Get"]["Key"], m.Consistency.TRANSACTIONAL)
                for e in body["TransactItems"]
            ]
        else:
            gets = [
                (table, key, _consistency(spec))
                for table, spec in body["RequestItems"].items()
                for key in spec["Keys"]
            ]
        if tally is not None:
            for table, key, consistency in gets:
                size = m.item_size(replay.item(table, key))
                component = f"read {table} {_kind(key)} {operation} {consistency}"
                tally.add("DynamoDB", component, "dynamodb_rru", m.read_units(size, consistency), size)
        replay.send(request)
        return
    # Query and Scan read every item they match before a filter: the replay drops the filter
    # and the projection to see them whole (nothing later depends on what the replay answers).
    table = body["TableName"]
    probe = {k: v for k, v in body.items() if k not in ("FilterExpression", "ProjectionExpression", "Select")}
    status, answer = replay.send(request, _used_names_only(probe))
    if status >= 400:  # e.g. names only the filter used: fall back to what the request returns
        status, answer = replay.send(request)
    if tally is None:
        return
    shape = replay.tables.get(table)
    index = shape.indexes.get(body.get("IndexName", "")) if shape else None
    size = 0
    for found in answer.get("Items", []):
        whole = (
            replay.item(table, shape.key_of(found))
            if shape and all(k in found for k in shape.keys)
            else found
        )
        whole = whole or found
        size += m.item_size(index.projected(whole) if index else whole)
    where = f"{table}/{body['IndexName']}" if "IndexName" in body else table
    kind = _query_kind(body) if operation == "Query" else ""
    component = f"read {where} {kind} {operation} {_consistency(body)}".replace("  ", " ")
    tally.add("DynamoDB", component, "dynamodb_rru", m.read_units(size, _consistency(body)), size)


def _query_kind(body: Mapping[str, Any]) -> str:
    values = body.get("ExpressionAttributeValues", {})
    condition = str(body.get("KeyConditionExpression", ""))
    for name, value in values.items():
        if name in condition:
            return partition_kind(value)
    return ""


def _used_names_only(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without the expression names and values no remaining expression uses."""
    text = " ".join(str(body.get(k, "")) for k in ("KeyConditionExpression", "ConditionExpression"))
    out = dict(body)
    for field_name in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        if field_name in out:
            kept = {k: v for k, v in out[field_name].items() if k in text}
            if kept:
                out[field_name] = kept
            else:
                del out[field_name]
    return out


# --- the other services, from the requests ----------------------------------------------------


def _queue(request: Request, body: Mapping[str, Any]) -> str:
    url = (
        str(body.get("QueueUrl", ""))
        or parse_qs(request.body.decode(errors="replace")).get("QueueUrl", [""])[0]
    )
    return url.rstrip("/").rpartition("/")[2] or "?"


def _sqs_payload(operation: str, body: Mapping[str, Any]) -> int:
    def one(message: Mapping[str, Any]) -> int:
        attributes = json.dumps(message.get("MessageAttributes", {}))
        return len(str(message.get("MessageBody", "")).encode()) + len(attributes.encode())

    if operation == "SendMessage":
        return one(body)
    if operation == "SendMessageBatch":
        return sum(one(entry) for entry in body.get("Entries", []))
    return 0


# The prefixes the data bucket's lifecycle rules expire: the local stack lists them to apply the
# rules (``local.lifecycle``), as S3 would on its own.
_LIFECYCLE_PREFIXES = frozenset(prefix for bucket in resources.BUCKETS for prefix in bucket.expire_prefixes)


def _listed_prefix(request: Request) -> str:
    return parse_qs(urlsplit(request.url).query).get("prefix", [""])[0]


def account_other(request: Request, tally: Tally, polled_queues: frozenset[str]) -> None:
    service, operation = request.service, request.operation
    if service == "sqs":
        body = request.json() if request.body.startswith(b"{") else {}
        queue = _queue(request, body)
        if operation == "ReceiveMessage" and queue in polled_queues:
            return  # Lambda's event source mapping polls on AWS: modelled by bench.cost, not counted
        price = "sqs_fifo" if queue.endswith(".fifo") else "sqs_standard"
        chunks = m.chunks(_sqs_payload(operation, body), m.p.SQS_CHUNK_BYTES)
        tally.add("SQS", f"{operation} {queue}", price, chunks)
    elif service == "s3":
        if operation == "ListObjects" and _listed_prefix(request) in _LIFECYCLE_PREFIXES:
            return  # the local stack applying the bucket's expiry rules, which S3 does for free
        parts = [segment for segment in urlsplit(request.url).path.split("/") if segment]
        where = f"{parts[0]}/{parts[1]}/*" if len(parts) > 2 else "/".join(parts)
        if operation in ("GetObject", "HeadObject", "HeadBucket"):
            tally.add("S3", f"{operation} {where}", "s3_read", 1)
        elif operation not in ("DeleteObject", "DeleteObjects", "AbortMultipartUpload"):  # deletes are free
            tally.add("S3", f"{operation} {where}", "s3_write", 1)
    elif service == "kms":
        tally.add("KMS", operation, "kms_request", 1)
    elif service == "secretsmanager":
        tally.add("Secrets Manager", operation, "secrets_request", 1)
    # Step Functions API calls are free (transitions are billed: bench.cost counts them);
    # Lambda invokes are counted where they run (the invocation records).


def replay(
    requests: Sequence[Request], windows: Sequence[Window], polled_queues: frozenset[str] = frozenset()
) -> dict[str, Tally]:
    """Replay the DynamoDB requests (all of them, in order, up to the last window's end) and
    tally every request that falls in a window."""
    tallies = {window.name: Tally() for window in windows}
    end = max((w.end_line for w in windows), default=0)
    with _cheap_dispatch():
        _replay(requests, windows, tallies, end, polled_queues)
    return tallies


@contextmanager
def _cheap_dispatch() -> Iterator[None]:
    """moto's dispatch as the stack's moto server has it (``local.moto_server.install_cheap_dispatch``:
    each host's backend and each response class's actions found once, not on every request,
    the same answers), for the replay's length: a sixth of a replay's time was moto listing its
    own package and a class's methods again. What it replaced is put back after."""
    find = DomainDispatcherApplication.get_backend_for_host
    method_names = core_responses.method_names_from_class
    moto_server.install_cheap_dispatch()
    try:
        yield
    finally:
        DomainDispatcherApplication.get_backend_for_host = find  # type: ignore[method-assign]
        core_responses.method_names_from_class = method_names


def _replay(
    requests: Sequence[Request],
    windows: Sequence[Window],
    tallies: dict[str, Tally],
    end: int,
    polled_queues: frozenset[str],
) -> None:
    dynamo = DynamoReplay()
    for request in requests:
        if request.line >= end:
            break
        window = next((w for w in windows if w.holds(request.line)), None)
        tally = tallies[window.name] if window else None
        if tally is not None:
            key = f"{request.service}.{request.operation}"
            tally.calls[key] = tally.calls.get(key, 0) + 1
        if request.service == "dynamodb":
            if request.operation == "CreateTable":
                shape = TableShape.from_create(request.json())
                dynamo.tables[shape.name] = shape
                dynamo.send(request)
            elif request.operation in _WRITES:
                account_write(dynamo, request, tally)
            elif request.operation in _READS:
                account_read(dynamo, request, tally)
            else:
                dynamo.send(request)
        elif tally is not None:
            account_other(request, tally, polled_queues)
