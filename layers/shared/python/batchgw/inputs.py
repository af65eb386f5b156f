"""A batch's own copy of its input, read back: the physical lines of a file batch's copy,
and every batch's requests as (custom_id, canonical model, body), streamed from S3.

The workflow reads them to write a batch's requests; the API and the console read them
again once a batch has ended (its ended requests gave up their bodies): to retry, or to
export, the requests that did not succeed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.storage.blobs import input_file_key, input_key
from batchgw.validation.file import iter_planned, split_lines

READ_CHUNK_BYTES = 256 * 1024


def input_lines(deps: Deps, batch: BatchRecord, key: str | None = None) -> Iterator[bytes]:
    """A file batch's input, as physical lines streamed from S3 (bounded memory): its own
    copy, or the JSONL object at ``key``."""
    return split_lines(
        deps.blobs.iter_chunks(key or input_file_key(batch.id), READ_CHUNK_BYTES),
        max_line_bytes=deps.settings.batch_max_line_kb * 1024,
    )


def requests_of(deps: Deps, batch: BatchRecord, key: str | None = None) -> Iterator[tuple[str, str, Any]]:
    """The batch's requests as (custom_id, canonical model, body), in order (the request of
    index i is the i-th), streamed from S3: a file batch's from its own copy, or from the
    JSONL object at ``key`` (its input file)."""
    if batch.input_method == "file":
        for planned in iter_planned(
            input_lines(deps, batch, key),
            endpoint=batch.endpoint,
            catalog=deps.catalog,
            role=batch.owner_role,
            anthropic_version=batch.anthropic_version,
            settings=deps.settings,
        ):
            yield planned.custom_id, planned.model, planned.body
        return
    for line in deps.blobs.iter_lines_gz(input_key(batch.id)):
        request = json.loads(line)
        yield request["custom_id"], request["model"], request["body"]
