"""DynamoDB refusing requests for throughput, for chaos runs of the local stack.

On AWS a table refuses what is beyond its throughput: a provisioned table
(``-c tableCapacity=provisioned``, ``infra.capacity``) past its capacity until auto scaling
follows, an on-demand one past twice its previous peak or on a hot partition. moto never
does. ``BATCHGW_DYNAMODB_THROTTLE_RATE`` (a probability) makes the moto process refuse each
DynamoDB item call (reads, writes, batches, transactions) with that probability, before it
does anything, as DynamoDB does:

- a single-item call or a query answers ``ProvisionedThroughputExceededException`` (which
  the SDK tries again, with its backoff);
- a batch write of several items leaves some of them (each at even odds, one at least)
  unprocessed and writes the rest, answering them in ``UnprocessedItems`` for the caller to
  send again; when it leaves them all, the call answers as a single-item call;
- a transaction answers ``TransactionCanceledException`` whose reasons say
  ``ThrottlingError`` for one of its actions and ``None`` for the rest (which the SDK does
  not try again: ``batchgw.storage.dynamo.Table.transact`` must).

``BATCHGW_DYNAMODB_THROTTLE_SEED`` seeds the draws. Each refusal is logged
(``dynamodb throttled``).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from moto.dynamodb.exceptions import DynamodbException, TransactionCanceledException
from moto.dynamodb.responses import DynamoHandler

THROTTLE_RATE_ENV = "BATCHGW_DYNAMODB_THROTTLE_RATE"
THROTTLE_SEED_ENV = "BATCHGW_DYNAMODB_THROTTLE_SEED"
THROTTLED = "dynamodb throttled"  # the log line of each refusal

_TRANSACTION = "transact_write_items"
_BATCH_WRITE = "batch_write_item"
_ITEM_CALLS = (
    "get_item",
    "put_item",
    "update_item",
    "delete_item",
    "query",
    "batch_get_item",
    _BATCH_WRITE,
    _TRANSACTION,
)
_EXCEEDED = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"

log = logging.getLogger("local.throttling")


def throttle_rate(env: Mapping[str, str]) -> float:
    value = env.get(THROTTLE_RATE_ENV, "").strip()
    if not value:
        return 0.0
    rate = float(value)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"{THROTTLE_RATE_ENV}: {value!r} is not a probability between 0 and 1")
    return rate


class Throttling:
    """Draws, for each DynamoDB item call moto answers, whether it is refused."""

    def __init__(self, rate: float, seed: int = 0) -> None:
        self.rate = rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.refused = 0
        self._originals: dict[str, Callable[..., Any]] = {}

    def _draw(self) -> tuple[bool, float]:
        with self._lock:
            refused = self._rng.random() < self.rate
            self.refused += refused
            return refused, self._rng.random()

    def _left_over(self, requests: list[tuple[str, Any]]) -> set[int]:
        """Which of a refused batch write's requests are left unprocessed: each at even
        odds, one at least."""
        with self._lock:
            left = {i for i in range(len(requests)) if self._rng.random() < 0.5}
            return left or {self._rng.randrange(len(requests))}

    def _partly(self, handler: DynamoHandler, original: Callable[..., Any], pick: float) -> Any:
        """A refused batch write: some of its requests written, the rest handed back."""
        batches = handler.body.get("RequestItems", {})
        requests = [(table, request) for table, items in batches.items() for request in items]
        left = self._left_over(requests) if len(requests) > 1 else {0}
        if len(left) == len(requests):
            self._refuse(handler, _BATCH_WRITE, pick)
        log.warning(THROTTLED, extra={"call": _BATCH_WRITE, "unprocessed": len(left)})
        kept: dict[str, list[Any]] = {}
        unprocessed: dict[str, list[Any]] = {}
        for i, (table, request) in enumerate(requests):
            (unprocessed if i in left else kept).setdefault(table, []).append(request)
        handler.body = {**handler.body, "RequestItems": kept}
        answer = original(handler)
        answer.result["UnprocessedItems"] = unprocessed
        return answer

    def _refuse(self, handler: DynamoHandler, name: str, pick: float) -> None:
        log.warning(THROTTLED, extra={"call": name})
        if name == _TRANSACTION:
            actions = len(handler.body.get("TransactItems", [])) or 1
            throttled = int(pick * actions)
            raise TransactionCanceledException(
                [
                    (
                        "ThrottlingError",
                        "Throughput exceeds the current capacity of your table or index.",
                        None,
                    )
                    if i == throttled
                    else (None, None, None)
                    for i in range(actions)
                ]
            )
        raise DynamodbException(
            _EXCEEDED,
            "The level of configured provisioned throughput for the table was exceeded. "
            "Consider increasing your provisioning level with the UpdateTable API.",
        )

    def _wrapped(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def call(handler: DynamoHandler) -> Any:
            refused, pick = self._draw()
            if refused and name == _BATCH_WRITE:
                return self._partly(handler, original, pick)
            if refused:
                self._refuse(handler, name, pick)
            return original(handler)

        return call

    def install(self) -> None:
        """Refuse from now on (inside moto's action methods, so the refusal is its answer)."""
        for name in _ITEM_CALLS:
            self._originals[name] = getattr(DynamoHandler, name)
            setattr(DynamoHandler, name, self._wrapped(name, self._originals[name]))

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(DynamoHandler, name, original)
        self._originals.clear()


def install(env: Mapping[str, str]) -> Throttling | None:
    """Install the refusals ``env`` asks for; None if it asks none."""
    rate = throttle_rate(env)
    if not rate:
        return None
    throttling = Throttling(rate, seed=int(env.get(THROTTLE_SEED_ENV, "0")))
    throttling.install()
    log.info("dynamodb throttling installed", extra={"rate": rate})
    return throttling
