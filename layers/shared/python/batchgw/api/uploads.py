"""The Uploads API: a file declared first, its parts sent one request each, then completed
into one batch input file (``/v1/uploads``, as OpenAI's)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from batchgw.api.files import (
    UPLOAD_SECONDS,
    declared_file,
    may_create_file,
    multipart_file,
    streamed_input_file,
)
from batchgw.api.shapes import file_object, upload_object
from batchgw.deps import Deps
from batchgw.domain.errors import BadRequest, NotFound
from batchgw.domain.principal import Principal

UPLOAD_SK = "upload"


def _upload_pk(upload_id: str) -> str:
    return f"upload#{upload_id}"


def create_upload(deps: Deps, principal: Principal, body: Any) -> dict[str, Any]:
    """POST /v1/uploads: declare a file that will arrive in parts, under the rule every route
    that makes an input file checks (``files.may_create_file``): a refused declaration counts,
    as a refused upload does."""
    may_create_file(deps, principal)
    filename, size = declared_file(deps, body)
    mime = body.get("mime_type")
    if not isinstance(mime, str) or not mime:
        raise BadRequest("'mime_type' must be a non-empty string.", param="mime_type")
    now = int(deps.clock())
    upload_id = f"upload_{uuid.uuid4().hex}"
    record = {
        "pk": _upload_pk(upload_id),
        "sk": UPLOAD_SK,
        "upload_id": upload_id,
        "owner": principal.user_id,
        "filename": filename,
        "purpose": "batch",
        "bytes": size,
        "mime_type": mime,
        "status": "pending",
        "created_at": now,
        "expires_at": now + UPLOAD_SECONDS,
        "ttl": now + UPLOAD_SECONDS + 86400,
    }
    deps.control.put(record, new=True)
    return upload_object(record)


def _visible_upload(deps: Deps, principal: Principal, upload_id: str) -> dict[str, Any]:
    record = deps.control.get(_upload_pk(upload_id), UPLOAD_SK) if upload_id.startswith("upload_") else None
    if record is None or (record["owner"] != principal.user_id and not principal.is_admin):
        raise NotFound(f"No such upload: '{upload_id}'.", code="upload_not_found")
    return record


def _pending(deps: Deps, record: dict[str, Any]) -> None:
    if record["status"] != "pending":
        raise BadRequest(f"The upload is {record['status']}.", code="upload_not_pending")
    if int(record["expires_at"]) <= deps.clock():
        raise BadRequest("The upload has expired.", code="upload_expired")


def add_part(
    deps: Deps, principal: Principal, upload_id: str, content_type: str | None, body: bytes
) -> dict[str, Any]:
    """POST /v1/uploads/{id}/parts: one part, as multipart field ``data``."""
    record = _visible_upload(deps, principal, upload_id)
    _pending(deps, record)
    _, data = multipart_file(
        deps,
        content_type,
        body,
        field="data",
        what="An upload's part",
        instead=(
            f"Send the file in parts of at most {deps.settings.batch_max_body_mb:g} MiB: with the OpenAI "
            f"SDK, client.uploads.upload_file_chunked(..., part_size={deps.settings.batch_max_body_mb:g} "
            "* 1024 * 1024) (its default part size, 64 MiB, is too large here)."
        ),
    )
    if not data:
        raise BadRequest("The part is empty: send it as multipart field 'data'.", param="data")
    part_id = f"part_{uuid.uuid4().hex}"
    key = f"uploads/{upload_id}/{part_id}"
    deps.blobs.put(key, data)
    now = int(deps.clock())
    deps.control.put(
        {
            "pk": _upload_pk(upload_id),
            "sk": f"part#{part_id}",
            "key": key,
            "size": len(data),
            "created_at": now,
            "ttl": int(record["ttl"]),
        }
    )
    return {"id": part_id, "object": "upload.part", "created_at": now, "upload_id": upload_id}


def complete_upload(deps: Deps, principal: Principal, upload_id: str, body: Any) -> dict[str, Any]:
    """POST /v1/uploads/{id}/complete: the parts, in the order given, become one file."""
    record = _visible_upload(deps, principal, upload_id)
    _pending(deps, record)
    part_ids = body.get("part_ids") if isinstance(body, dict) else None
    if not isinstance(part_ids, list) or not part_ids or not all(isinstance(p, str) for p in part_ids):
        raise BadRequest("'part_ids' must be a non-empty list of part ids.", param="part_ids")
    parts = {
        str(p["sk"]).removeprefix("part#"): p for p in deps.control.query(_upload_pk(upload_id), "part#")
    }
    missing = [p for p in part_ids if p not in parts]
    if missing:
        raise BadRequest(f"No such part of this upload: '{missing[0]}'.", param="part_ids")
    total = sum(int(parts[p]["size"]) for p in part_ids)
    if total != int(record["bytes"]):
        raise BadRequest(
            f"The parts hold {total} bytes; the upload declared {record['bytes']}.", param="part_ids"
        )
    md5 = body.get("md5")
    chunks = _read_parts(deps, (str(parts[p]["key"]) for p in part_ids))
    file = streamed_input_file(
        deps, principal, str(record["filename"]), total, chunks, md5=md5 if isinstance(md5, str) else None
    )
    if not deps.control.transition(
        _upload_pk(upload_id),
        UPLOAD_SK,
        {"status": "completed", "file_id": file.id},
        expect={"status": "pending"},
    ):
        raise BadRequest("The upload was completed or cancelled meanwhile.", code="upload_not_pending")
    for part in parts.values():
        deps.blobs.delete(str(part["key"]))
    return upload_object({**record, "status": "completed"}, file_object(file))


def _read_parts(deps: Deps, keys: Iterable[str]) -> Iterator[bytes]:
    """The parts' bytes in order, a part at a time (each at most BATCH_MAX_BODY_MB)."""
    for key in keys:
        yield deps.blobs.get(key)


def cancel_upload(deps: Deps, principal: Principal, upload_id: str) -> dict[str, Any]:
    record = _visible_upload(deps, principal, upload_id)
    _pending(deps, record)
    deps.control.transition(
        _upload_pk(upload_id), UPLOAD_SK, {"status": "cancelled"}, expect={"status": "pending"}
    )
    return upload_object({**record, "status": "cancelled"})
