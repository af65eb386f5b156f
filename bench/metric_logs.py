"""The EMF metrics the local stack's workers wrote to their logs (``make bench-yield`` reads the
chains' AnswerToNextCall from them)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any


def metric_values(lines: Iterable[str], name: str, start: float, end: float) -> list[float]:
    """The values of the EMF metric ``name`` in ``lines`` (log lines, EMF or not) stamped
    from ``start`` to ``end`` (seconds since the epoch). A worker writes what it measured at
    the end of each invocation, or a minute at most after: a batch that ended a minute
    before its run has all its values in its run."""
    values: list[float] = []
    for line in lines:
        if name not in line or not line.startswith('{"_aws"'):
            continue
        for document in _documents(line):
            stamp = document.get("_aws", {}).get("Timestamp")
            found = document.get(name)
            if found is None or stamp is None or not start <= stamp / 1000 <= end:
                continue
            values.extend(found if isinstance(found, list) else [found])
    return values


def _documents(line: str) -> Iterator[dict[str, Any]]:
    """The JSON objects ``line`` holds: the invocations a local worker runs in threads share
    its output, so a line can hold two (up to a line cut into by another, left out)."""
    decoder = json.JSONDecoder()
    at = 0
    while at < len(line):
        try:
            document, at = decoder.raw_decode(line, at)
        except json.JSONDecodeError:
            return
        if isinstance(document, dict):
            yield document
        while at < len(line) and line[at].isspace():
            at += 1
