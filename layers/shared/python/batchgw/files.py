"""Files and uploads: batch inputs in, result files out, in OpenAI's shapes.

A file's bytes live in S3 (``files/<id>``); its record (size, SHA-256, owner, purpose,
expiry) in the files table. Files up to the API's payload limit come through
``POST /v1/files``; larger ones, up to ``BATCH_MAX_BODY_MB``, through the Uploads API
(``/v1/uploads``: create, add parts, complete), whose parts reach S3 one request at a
time. Another user's file, and an expired or deleted one, reads as not found.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from email.parser import BytesParser
from email.policy import HTTP
from typing import IO, Any

from batchgw.auth import Principal
from batchgw.deps import Deps
from batchgw.errors import BadRequest, Forbidden, NotFound, PayloadTooLarge, TooManyRequests
from batchgw.records import created_key

OWNER_INDEX = "by_owner"
UPLOAD_SECONDS = 3600  # an upload must complete within an hour, as OpenAI's do
INLINE_DOWNLOAD_LIMIT = 5 * 1024 * 1024  # larger downloads answer 302 to S3 (Lambda's 6 MB)


def file_key(file_id: str) -> str:
    return f"files/{file_id}"


def file_object(record: dict[str, Any]) -> dict[str, Any]:
    expires = record.get("expires_at")
    return {
        "id": record["pk"],
        "object": "file",
        "bytes": int(record["bytes"]),
        "created_at": int(record["created_at"]),
        "expires_at": None if expires is None else int(expires),
        "filename": record["filename"],
        "purpose": record["purpose"],
        "status": "processed",
        "status_details": None,
    }


def _require_role(deps: Deps, principal: Principal) -> None:
    if not principal.at_least(deps.settings.batch_min_role):
        raise Forbidden(f"Your role may not upload files (needs {deps.settings.batch_min_role} or above).")


def _count_upload(deps: Deps, principal: Principal) -> None:
    """Uploads per hour (BATCH_FILE_UPLOADS_PER_HOUR), counted before the upload runs,
    so failed uploads count too."""
    now = int(deps.clock())
    hour = now // 3600
    limit = deps.settings.batch_file_uploads_per_hour
    if not deps.control.count_within(
        f"uploads#{principal.user_id}", f"hour#{hour}", limit=limit, ttl=(hour + 2) * 3600
    ):
        raise TooManyRequests(f"You may upload {limit} files per hour.", code="upload_rate_limited")


def store_file(
    deps: Deps,
    owner: str,
    filename: str,
    data: bytes | IO[bytes],
    *,
    purpose: str,
    file_id: str | None = None,
    expires_at: int | None = None,
    size: int | None = None,
    digest: str | None = None,
) -> dict[str, Any] | None:
    """Write a file's bytes and record. With a given ``file_id`` (result files) nothing is
    written again once a record exists, deleted or not; returns None then.

    ``data`` is bytes, or a file object with its ``size`` and SHA-256 ``digest``.
    """
    now = int(deps.clock())
    file_id = file_id or f"file-{uuid.uuid4().hex}"
    if deps.files.get(file_id) is not None:
        return None
    if isinstance(data, bytes):
        size, digest = len(data), hashlib.sha256(data).hexdigest()
        deps.blobs.put(file_key(file_id), data, "application/jsonl")
    else:
        assert size is not None and digest is not None
        deps.blobs.put_stream(file_key(file_id), data)
    record = {
        "pk": file_id,
        "owner": owner,
        "bytes": size,
        "created_at": now,
        "expires_at": expires_at,
        "filename": filename,
        "purpose": purpose,
        "sha256": digest,
        "created_key": created_key(int(deps.clock() * 1000), file_id),
        "ttl": None if expires_at is None else expires_at + 86400,
    }
    return record if deps.files.put_new(record) else None


def _new_input_file(deps: Deps, principal: Principal, filename: str, data: bytes) -> dict[str, Any]:
    settings = deps.settings
    if len(data) > settings.max_body_bytes:
        raise PayloadTooLarge(f"The file is larger than {settings.batch_max_body_mb:g} MiB.")
    if not data:
        raise BadRequest("The file is empty.", param="file")
    limit = int(settings.batch_files_max_total_mb_per_user * 1024 * 1024)
    stored = sum(
        int(r["bytes"])
        for r in deps.files.for_owner(principal.user_id, OWNER_INDEX)
        if r.get("purpose") == "batch"
    )
    if stored + len(data) > limit:
        raise TooManyRequests(
            f"Your input files would take {stored + len(data)} bytes, over the limit of "
            f"{settings.batch_files_max_total_mb_per_user:g} MiB; delete some first.",
            code="file_storage_limit",
        )
    expires = int(deps.clock() + settings.batch_file_retention_days * 86400)
    record = store_file(deps, principal.user_id, filename, data, purpose="batch", expires_at=expires)
    assert record is not None  # a fresh id cannot exist yet
    return record


def parse_multipart(content_type: str | None, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a multipart/form-data body: name -> (filename, bytes)."""
    if not content_type or not content_type.lower().startswith("multipart/form-data"):
        raise BadRequest("Send the file as multipart/form-data.")
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\nMIME-Version: 1.0\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise BadRequest("The multipart/form-data body could not be read.")
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        fields[name] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return fields


def upload_file(deps: Deps, principal: Principal, content_type: str | None, body: bytes) -> dict[str, Any]:
    """POST /v1/files."""
    _require_role(deps, principal)
    _count_upload(deps, principal)
    fields = parse_multipart(content_type, body)
    purpose = fields.get("purpose", (None, b""))[1].decode(errors="replace").strip()
    if purpose != "batch":
        raise BadRequest("Only purpose 'batch' files can be uploaded.", param="purpose")
    if "file" not in fields:
        raise BadRequest("The 'file' field is missing.", param="file")
    filename, data = fields["file"]
    return file_object(_new_input_file(deps, principal, filename or "upload.jsonl", data))


def visible_file(deps: Deps, principal: Principal, file_id: str, *, pending: bool = False) -> dict[str, Any]:
    """The caller's live file; one still waiting for its presigned upload only if ``pending``."""
    record = deps.files.get(file_id) if file_id.startswith("file-") else None
    if (
        record is None
        or record.get("deleted")
        or (bool(record.get("pending")) != pending)
        or (record["owner"] != principal.user_id and not principal.is_admin)
        or (record.get("expires_at") is not None and int(record["expires_at"]) <= deps.clock())
    ):
        raise NotFound(f"No such file: '{file_id}'.", code="file_not_found")
    return record


def get_file(deps: Deps, principal: Principal, file_id: str) -> dict[str, Any]:
    return file_object(visible_file(deps, principal, file_id))


def list_files(deps: Deps, principal: Principal, params: dict[str, list[str]]) -> dict[str, Any]:
    def one(name: str) -> str | None:
        values = params.get(name) or []
        return values[-1] if values else None

    try:
        limit = int(one("limit") or 10000)
    except ValueError:
        raise BadRequest("'limit' must be an integer from 1 to 10000.", param="limit") from None
    if not 1 <= limit <= 10000:
        raise BadRequest("'limit' must be an integer from 1 to 10000.", param="limit")
    purpose, after, order = one("purpose"), one("after"), one("order") or "desc"
    if order not in ("asc", "desc"):
        raise BadRequest("'order' must be 'asc' or 'desc'.", param="order")
    now = deps.clock()
    records = [
        r
        for r in deps.files.for_owner(principal.user_id, OWNER_INDEX)
        if not r.get("pending")
        and (purpose is None or r["purpose"] == purpose)
        and (r.get("expires_at") is None or int(r["expires_at"]) > now)
    ]
    if order == "asc":
        records.reverse()
    if after:
        ids = [r["pk"] for r in records]
        if after not in ids:
            raise BadRequest(f"'after' names no file of yours: '{after}'.", param="after")
        records = records[ids.index(after) + 1 :]
    page = [file_object(r) for r in records[:limit]]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(records) > limit,
    }


def delete_file(deps: Deps, principal: Principal, file_id: str) -> dict[str, Any]:
    """Delete for good; a batch already created from it keeps its own copy."""
    record = visible_file(deps, principal, file_id)
    deps.blobs.delete(file_key(file_id))
    deps.files.mark_deleted(file_id, ttl=int(deps.clock()) + 30 * 86400)
    return {"id": record["pk"], "object": "file", "deleted": True}


def file_content(deps: Deps, principal: Principal, file_id: str) -> tuple[bytes | None, str | None, str]:
    """(bytes, None, sha256) for a small file, (None, presigned URL, sha256) for a large one."""
    record = visible_file(deps, principal, file_id)
    digest = str(record["sha256"])
    if int(record["bytes"]) <= INLINE_DOWNLOAD_LIMIT:
        return deps.blobs.get(file_key(file_id)), None, digest
    return None, deps.blobs.presigned_get(file_key(file_id)), digest


# --- presigned uploads: the bytes go straight to S3 -------------------------------------------


def _declared_file(deps: Deps, body: dict[str, Any]) -> tuple[str, int]:
    """The filename and size a presigned upload or an Uploads API upload declares."""
    filename, purpose, size = body.get("filename"), body.get("purpose"), body.get("bytes")
    if not isinstance(filename, str) or not filename:
        raise BadRequest("'filename' must be a non-empty string.", param="filename")
    if purpose != "batch":
        raise BadRequest("Only purpose 'batch' files can be uploaded.", param="purpose")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise BadRequest("'bytes' must be a positive integer.", param="bytes")
    if size > deps.settings.max_body_bytes:
        raise PayloadTooLarge(f"The file is larger than {deps.settings.batch_max_body_mb:g} MiB.")
    return filename, size


def presign_upload(deps: Deps, principal: Principal, body: Any) -> dict[str, Any]:
    """POST /v1/files/presigned: a file record waiting for its bytes, and a presigned S3 PUT
    URL for them (valid for an hour). ``POST /v1/files/{id}/complete`` then checks the
    object's size and records its SHA-256; until then the file cannot be used."""
    _require_role(deps, principal)
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    filename, size = _declared_file(deps, body)
    _count_upload(deps, principal)
    now = int(deps.clock())
    file_id = f"file-{uuid.uuid4().hex}"
    record = {
        "pk": file_id,
        "owner": principal.user_id,
        "bytes": size,
        "created_at": now,
        "expires_at": int(now + deps.settings.batch_file_retention_days * 86400),
        "filename": filename,
        "purpose": "batch",
        "pending": True,
        "created_key": created_key(int(deps.clock() * 1000), file_id),
        "ttl": now + UPLOAD_SECONDS + 86400,
    }
    deps.files.put_new(record)
    url = deps.blobs.presigned_put(file_key(file_id), size, expires_in=UPLOAD_SECONDS)
    return {
        "file": file_object(record),
        "upload_url": url,
        "method": "PUT",
        "headers": {"Content-Length": str(size)},
        "expires_at": now + UPLOAD_SECONDS,
    }


def complete_presigned(deps: Deps, principal: Principal, file_id: str) -> dict[str, Any]:
    """POST /v1/files/{id}/complete: the presigned upload is done; check and record it."""
    record = visible_file(deps, principal, file_id, pending=True)
    size = deps.blobs.size(file_key(file_id))
    if size is None:
        raise BadRequest("Nothing was uploaded to the file's URL yet.", code="upload_incomplete")
    if size != int(record["bytes"]):
        raise BadRequest(
            f"The upload holds {size} bytes; the file declared {record['bytes']}.",
            code="upload_size_mismatch",
        )
    digest = hashlib.sha256()
    for chunk in deps.blobs.iter_chunks(file_key(file_id)):
        digest.update(chunk)
    limit = int(deps.settings.batch_files_max_total_mb_per_user * 1024 * 1024)
    stored = sum(
        int(r["bytes"])
        for r in deps.files.for_owner(principal.user_id, OWNER_INDEX)
        if r.get("purpose") == "batch" and not r.get("pending")
    )
    if stored + size > limit:
        raise TooManyRequests(
            "Your input files would exceed your storage limit; delete some first.", code="file_storage_limit"
        )
    deps.files.complete(file_id, digest.hexdigest(), ttl=int(record["expires_at"]) + 86400)
    return file_object(record)


# --- the Uploads API ----------------------------------------------------------------------


def _upload_pk(upload_id: str) -> str:
    return f"upload#{upload_id}"


def upload_object(record: dict[str, Any], file: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": record["upload_id"],
        "object": "upload",
        "bytes": int(record["bytes"]),
        "created_at": int(record["created_at"]),
        "expires_at": int(record["expires_at"]),
        "filename": record["filename"],
        "purpose": record["purpose"],
        "status": record["status"],
        "file": file,
    }


def create_upload(deps: Deps, principal: Principal, body: Any) -> dict[str, Any]:
    """POST /v1/uploads: declare a file that will arrive in parts."""
    _require_role(deps, principal)
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    filename, size = _declared_file(deps, body)
    mime = body.get("mime_type")
    if not isinstance(mime, str) or not mime:
        raise BadRequest("'mime_type' must be a non-empty string.", param="mime_type")
    _count_upload(deps, principal)
    now = int(deps.clock())
    upload_id = f"upload_{uuid.uuid4().hex}"
    record = {
        "pk": _upload_pk(upload_id),
        "sk": "upload",
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
    record = deps.control.get(_upload_pk(upload_id), "upload") if upload_id.startswith("upload_") else None
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
    data = parse_multipart(content_type, body).get("data", (None, b""))[1]
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
    data = b"".join(_read_parts(deps, (str(parts[p]["key"]) for p in part_ids)))
    md5 = body.get("md5")
    if isinstance(md5, str) and md5 and hashlib.md5(data).hexdigest() != md5.lower():
        raise BadRequest("The parts do not match the given md5.", param="md5")
    file_record = _new_input_file(deps, principal, str(record["filename"]), data)
    if not deps.control.transition(
        _upload_pk(upload_id),
        "upload",
        {"status": "completed", "file_id": file_record["pk"]},
        expect={"status": "pending"},
    ):
        raise BadRequest("The upload was completed or cancelled meanwhile.", code="upload_not_pending")
    for p in parts.values():
        deps.blobs.delete(str(p["key"]))
    return upload_object({**record, "status": "completed"}, file_object(file_record))


def _read_parts(deps: Deps, keys: Iterable[str]) -> Iterable[bytes]:
    for key in keys:
        yield deps.blobs.get(key)


def cancel_upload(deps: Deps, principal: Principal, upload_id: str) -> dict[str, Any]:
    record = _visible_upload(deps, principal, upload_id)
    _pending(deps, record)
    deps.control.transition(
        _upload_pk(upload_id), "upload", {"status": "cancelled"}, expect={"status": "pending"}
    )
    return upload_object({**record, "status": "cancelled"})
