"""Ids that carry the time they were made: ``<prefix><ms:12 hex>0<19 random hex>``.

A list's ``after`` cursor names an id; from a time-ordered id the cursor's position in
the owner's list (newest first) is known without reading the record, so paging goes on
even after the batch or file it names was deleted or purged. (The ``0`` sets them apart
from the older random ids, whose 13th hex digit is a uuid4's ``4``.)
"""

from __future__ import annotations

import secrets
import string

from batchgw.domain.batch import created_key

_HEX = frozenset(string.hexdigits.lower())


def new_id(prefix: str, now: float) -> str:
    """A new id for a record made at ``now`` (unix seconds)."""
    return f"{prefix}{int(now * 1000):012x}0{secrets.token_hex(10)[:19]}"


def made_at_ms(prefix: str, record_id: str) -> int | None:
    """When a time-ordered id was made (unix milliseconds); None for any other id."""
    tail = record_id.removeprefix(prefix)
    if not record_id.startswith(prefix) or len(tail) != 32 or not set(tail) <= _HEX or tail[12] != "0":
        return None
    return int(tail[:12], 16)


def cursor_key(prefix: str, record_id: str) -> str | None:
    """The owner-index key of a time-ordered id (its record's ``created_key``); None for
    any other id."""
    ms = made_at_ms(prefix, record_id)
    return None if ms is None else created_key(ms, record_id)
