"""Files: batch input files in, result files out, in OpenAI's shapes.

A file's bytes live in S3 (``files/<id>``); its record (size, SHA-256, owner, purpose,
expiry) in the files table. Files up to the API's payload limit come through
``POST /v1/files``; larger ones through a presigned S3 upload (here) or the Uploads API
(``api.uploads``). Another user's file, and an expired or deleted one, reads as not found.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import replace
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, get_args

from batchgw.api import prompts
from batchgw.api.auth import require_role
from batchgw.api.ids import cursor_key, new_id
from batchgw.api.params import (
    ANSWER_LIMIT,
    Download,
    Params,
    binary_out_bytes,
    fitted_page,
    int_param,
    last,
    list_page,
)
from batchgw.api.shapes import file_object
from batchgw.config.settings import MULTIPART_FRAMING_BYTES, Settings
from batchgw.deps import Deps
from batchgw.domain.batch import created_key
from batchgw.domain.errors import BadRequest, NotFound, PayloadTooLarge, StorageError, TooManyRequests
from batchgw.domain.files import FilePurpose, FileRecord, file_key, incoming_key
from batchgw.domain.principal import Principal
from batchgw.domain.usage import OverLimit

FILE_PREFIX = "file-"


def larger_inputs(settings: Settings) -> str:
    """Where a body over BATCH_MAX_BODY_MB goes instead (the 413's advice): the Uploads API in
    parts that fit, as the OpenAI SDK sends them with ``part_size``, or a presigned upload."""
    mib = settings.batch_max_body_mb
    return (
        f"Send a larger batch as a file, through the Uploads API (POST /v1/uploads) in parts of at "
        f"most {mib:g} MiB (with the OpenAI SDK, client.uploads.upload_file_chunked(..., "
        f"part_size={mib:g} * 1024 * 1024)), or by a presigned upload (POST /v1/files/presigned)."
    )


# A file's name, as it is shown back: without a bound, a name of a few MB would pass every
# body limit and fail its record's 400 KB in DynamoDB (a 500).
MAX_FILENAME_CHARS = 512
UPLOAD_SECONDS = 3600  # an upload must complete within an hour, as OpenAI's do


def count_upload(deps: Deps, principal: Principal) -> None:
    """Uploads per hour (BATCH_FILE_UPLOADS_PER_HOUR), counted before the upload runs,
    so failed uploads count too."""
    now = int(deps.clock())
    hour = now // 3600
    limit = deps.settings.batch_file_uploads_per_hour
    if not deps.control.count_within(
        f"uploads#{principal.user_id}", f"hour#{hour}", limit=limit, ttl=(hour + 2) * 3600
    ):
        raise TooManyRequests(f"You may upload {limit} files per hour.", code="upload_rate_limited")


def _input_record(
    deps: Deps,
    principal: Principal,
    filename: str,
    size: int,
    *,
    sha256: str | None = None,
    pending: bool = False,
) -> FileRecord:
    """A new batch input file's record, expiring after BATCH_FILE_RETENTION_DAYS (a pending
    one's record expires with its upload URL, unless completed)."""
    clock_now = deps.clock()
    file_id = new_id(FILE_PREFIX, clock_now)
    now = int(clock_now)
    expires_at = int(clock_now + deps.settings.batch_file_retention_days * 86400)
    return FileRecord(
        id=file_id,
        owner=principal.user_id,
        bytes=size,
        created_at=now,
        created_key=cursor_key(FILE_PREFIX, file_id) or created_key(int(clock_now * 1000), file_id),
        filename=filename,
        purpose="batch",
        expires_at=expires_at,
        sha256=sha256,
        pending=pending,
        ttl=now + UPLOAD_SECONDS + 86400 if pending else expires_at + 86400,
    )


def storage_limit(deps: Deps) -> int:
    """BATCH_FILES_MAX_TOTAL_MB_PER_USER, in bytes."""
    return int(deps.settings.batch_files_max_total_mb_per_user * 1024 * 1024)


def storage_refusal(deps: Deps, refused: OverLimit) -> TooManyRequests:
    """The 429 for a write the user's stored inputs leave no room for: their input files and
    their batches' copies of their inputs would go over BATCH_FILES_MAX_TOTAL_MB_PER_USER."""
    return TooManyRequests(
        f"Your input files and the copies of their inputs your batches keep would take "
        f"{refused.count} bytes, over the limit of {deps.settings.batch_files_max_total_mb_per_user:g} "
        "MiB; delete some files, or batches that have ended, first.",
        code="file_storage_limit",
    )


def new_input_file(deps: Deps, principal: Principal, filename: str, data: bytes) -> FileRecord:
    """Store a batch input file's bytes and record, counted against the user's storage limit
    in the same write (429 over it, the bytes removed again)."""
    settings = deps.settings
    if len(data) > settings.max_file_bytes:
        raise PayloadTooLarge(f"The file is larger than {settings.batch_max_file_mb:g} MiB.")
    # An empty file is taken: a batch made from it fails validation with ``empty_file``.
    record = _input_record(deps, principal, filename, len(data), sha256=hashlib.sha256(data).hexdigest())
    deps.blobs.put(file_key(record.id), data, "application/jsonl")
    return _counted(deps, record)


def streamed_input_file(
    deps: Deps,
    principal: Principal,
    filename: str,
    size: int,
    chunks: Iterable[bytes],
    *,
    md5: str | None = None,
) -> FileRecord:
    """``new_input_file`` of ``size`` bytes that come as ``chunks``, streamed to S3 (in parts
    when large) and hashed on the way: memory holds a chunk, never the file. With ``md5``,
    bytes whose MD5 differs are removed again and refused (400)."""
    settings = deps.settings
    if size > settings.max_file_bytes:
        raise PayloadTooLarge(f"The file is larger than {settings.batch_max_file_mb:g} MiB.")
    record = _input_record(deps, principal, filename, size)
    sha256, md5_seen = hashlib.sha256(), hashlib.md5()

    def hashed() -> Iterator[bytes]:
        for chunk in chunks:
            sha256.update(chunk)
            md5_seen.update(chunk)
            yield chunk

    deps.blobs.put_chunks(file_key(record.id), hashed(), "application/jsonl")
    if md5 and md5_seen.hexdigest() != md5.lower():
        deps.blobs.delete(file_key(record.id))
        raise BadRequest("The parts do not match the given md5.", param="md5")
    return _counted(deps, replace(record, sha256=sha256.hexdigest()))


def _counted(deps: Deps, record: FileRecord) -> FileRecord:
    """Store the record of a file whose bytes are stored, counted against its owner's
    storage limit in the same write (429 over it, the bytes removed again)."""
    refused = deps.files.create_counted(record, limit=storage_limit(deps), now=deps.clock())
    if refused is not None:
        deps.blobs.delete(file_key(record.id))
        raise storage_refusal(deps, refused)
    return replace(record, counted=True)


def plain_filename(name: str) -> str:
    """A plain file name: letters, digits, spaces and ``._-`` only, within the upload rules."""
    kept = "".join(c if c.isalnum() or c in " ._-" else "_" for c in name).strip()
    return kept[-MAX_FILENAME_CHARS:] or "requests.jsonl"


def multipart_file(
    deps: Deps, content_type: str | None, body: bytes, *, field: str, what: str, instead: str
) -> tuple[dict[str, tuple[str | None, bytes]], bytes]:
    """The fields of a multipart body and the bytes of its ``field``, which may hold at most
    BATCH_MAX_BODY_MB: the limit is on those bytes, the framing around them allowed for (up to
    ``MULTIPART_FRAMING_BYTES``). 413 naming the limit (``what``, and ``instead``: where a
    larger one goes) for a larger one, before parsing when even the body is past it."""
    settings = deps.settings
    limit = settings.max_body_bytes
    too_large = f"{what} holds at most {settings.batch_max_body_mb:g} MiB ({limit} bytes, BATCH_MAX_BODY_MB)"
    if len(body) > limit + MULTIPART_FRAMING_BYTES:
        raise PayloadTooLarge(
            f"{too_large}; this request's body has {len(body)} bytes, more than that and its "
            f"multipart framing. {instead}"
        )
    fields = parse_multipart(content_type, body)
    data = fields.get(field, (None, b""))[1]
    if len(data) > limit:
        raise PayloadTooLarge(f"{too_large}; this one has {len(data)} bytes. {instead}")
    return fields, data


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


def may_create_file(deps: Deps, principal: Principal) -> None:
    """The rule every route that makes an input file of the caller's from bytes it is given
    or writes checks first (``POST /v1/files``, a presigned upload, the console's export of a
    batch's unfinished requests): 403 below BATCH_MIN_ROLE, then one upload of
    BATCH_FILE_UPLOADS_PER_HOUR counted (429 ``upload_rate_limited``), a refused one too. The
    storage limit is checked where the bytes are stored (``new_input_file``, or the
    presigned upload's completion)."""
    require_role(deps, principal, "upload files")
    count_upload(deps, principal)


def upload_file(deps: Deps, principal: Principal, content_type: str | None, body: bytes) -> dict[str, Any]:
    """POST /v1/files."""
    may_create_file(deps, principal)
    fields, data = multipart_file(
        deps,
        content_type,
        body,
        field="file",
        what="A file sent in one request",
        instead=larger_inputs(deps.settings),
    )
    purpose = fields.get("purpose", (None, b""))[1].decode(errors="replace").strip()
    if purpose != "batch":
        raise BadRequest("Only purpose 'batch' files can be uploaded.", param="purpose")
    if "file" not in fields:
        raise BadRequest("The 'file' field is missing.", param="file")
    filename = fields["file"][0]
    if filename:
        check_filename(filename)
    return file_object(new_input_file(deps, principal, filename or "upload.jsonl", data))


def visible_file(deps: Deps, principal: Principal, file_id: str, *, pending: bool = False) -> FileRecord:
    """The caller's live file; one still waiting for its presigned upload only if ``pending``."""
    record = deps.files.get(file_id) if file_id.startswith(FILE_PREFIX) else None
    if (
        record is None
        or record.deleted
        or record.pending != pending
        or (record.owner != principal.user_id and not principal.is_admin)
        or record.expired(deps.clock())
    ):
        raise NotFound(f"No such file: '{file_id}'.", code="file_not_found")
    return record


def batch_input_file(deps: Deps, principal: Principal, file_id: Any) -> FileRecord:
    """The caller's batch input file a body names in ``input_file_id``: 400 (never 404, which
    would say batch inference is not available here) when it names none of them."""
    if not isinstance(file_id, str):
        raise BadRequest("'input_file_id' must be a file id.", param="input_file_id")
    try:
        file = visible_file(deps, principal, file_id)
    except NotFound as exc:
        raise BadRequest(
            f"No usable input file '{file_id}': it does not exist, is not yours, has expired or was "
            "never completed.",
            code="invalid_input_file",
            param="input_file_id",
        ) from exc
    if file.purpose != "batch":
        raise BadRequest(f"File '{file_id}' is not a batch input file.", param="input_file_id")
    return file


def get_file(deps: Deps, principal: Principal, file_id: str) -> dict[str, Any]:
    return file_object(visible_file(deps, principal, file_id))


def list_files(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """GET /v1/files: the caller's files, newest first (``order=asc``: oldest first), a page
    after ``after``; the page is read from the owner index, never the whole list."""
    limit = int_param(params, "limit", default=10000, low=1, high=10000)
    purpose, after, order = last(params, "purpose"), last(params, "after"), last(params, "order") or "desc"
    if order not in ("asc", "desc"):
        raise BadRequest("'order' must be 'asc' or 'desc'.", param="order")
    after_key = None
    if after:
        # Page on from where ``after`` stands, even if that file was deleted since.
        after_key = cursor_key(FILE_PREFIX, after)
        if after_key is None:
            anchor = deps.files.get(after) if after.startswith(FILE_PREFIX) else None
            if anchor is None or (anchor.owner != principal.user_id and not principal.is_admin):
                raise BadRequest(f"'after' names no file of yours: '{after}'.", param="after")
            after_key = anchor.created_key
    if purpose is not None and purpose not in get_args(FilePurpose):
        return list_page([], has_more=False)  # no file has it
    records, has_more = deps.files.listed(
        principal.user_id,
        limit=limit,
        now=deps.clock(),
        ascending=order == "asc",
        after_key=after_key,
        purpose=purpose,
    )
    return fitted_page([file_object(r) for r in records], has_more=has_more)


def delete_file(deps: Deps, principal: Principal, file_id: str) -> dict[str, Any]:
    """Delete for good; a batch already created from it keeps its own copy. The record is
    tombstoned first (the file reads as not found from then on), then its bytes go: a
    download meanwhile answers 404, never the error of bytes half gone. (Bytes a crash leaves
    behind go with the bucket's expiry of the prefix.)"""
    record = visible_file(deps, principal, file_id)
    deps.files.delete_counted(record, ttl=int(deps.clock()) + 30 * 86400)
    deps.blobs.delete(file_key(file_id))
    return {"id": record.id, "object": "file", "deleted": True}


def delete_all_of(deps: Deps, owner: str) -> None:
    """Delete every file of ``owner`` (a deleted user's), each as ``delete_file`` does."""
    ttl = int(deps.clock()) + 30 * 86400
    for record in deps.files.for_owner(owner):
        deps.files.delete_counted(record, ttl=ttl)
        deps.blobs.delete(file_key(record.id))


def file_content(deps: Deps, principal: Principal, file_id: str) -> Download:
    """The file's bytes inline when small, else a presigned URL; with its SHA-256. A file
    whose bytes went meanwhile (a delete or purge between the two reads) is not found.

    An administrator's read of another user's file is a read of that user's content, as the
    Prompts view's is (``api.prompts``): every file holds prompts or the answers to them (an
    input file, a retry's or an export's, its requests; an output file, the answers; an error
    file, the errors, which may quote a request). So it is refused with 403 where prompts are
    not kept, and recorded as ``batch.requests.read`` against the owner before it is answered."""
    record = visible_file(deps, principal, file_id)
    if record.owner != principal.user_id:
        prompts.require_kept(deps)
        prompts.record_read(
            deps,
            principal,
            record.owner,
            target=record.id,
            detail=f"content of {record.purpose} file {record.filename!r} ({record.bytes} bytes)",
        )
    if binary_out_bytes(record.bytes) <= ANSWER_LIMIT:
        try:
            body = deps.blobs.get(file_key(file_id))
        except StorageError:
            if deps.blobs.exists(file_key(file_id)):
                raise
            raise NotFound(f"No such file: '{file_id}'.", code="file_not_found") from None
        return Download(body=body, content_type="application/octet-stream", sha256=record.sha256)
    return Download(location=deps.blobs.presigned_get(file_key(file_id)).url, sha256=record.sha256)


# --- presigned uploads: the bytes go straight to S3 -------------------------------------------


def check_filename(filename: str) -> None:
    """400 for a filename longer than MAX_FILENAME_CHARS: a file's record (and each list page
    it appears on) must stay small whatever a client names it."""
    if len(filename) > MAX_FILENAME_CHARS:
        raise BadRequest(
            f"'filename' is {len(filename)} characters long; at most {MAX_FILENAME_CHARS}.", param="filename"
        )


def declared_file(deps: Deps, body: Any) -> tuple[str, int]:
    """The filename and size a presigned upload or an Uploads API upload declares."""
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    filename, purpose, size = body.get("filename"), body.get("purpose"), body.get("bytes")
    if not isinstance(filename, str) or not filename:
        raise BadRequest("'filename' must be a non-empty string.", param="filename")
    check_filename(filename)
    if purpose != "batch":
        raise BadRequest("Only purpose 'batch' files can be uploaded.", param="purpose")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise BadRequest("'bytes' must be a positive integer.", param="bytes")
    if size > deps.settings.max_file_bytes:
        raise PayloadTooLarge(f"The file is larger than {deps.settings.batch_max_file_mb:g} MiB.")
    return filename, size


def presign_upload(deps: Deps, principal: Principal, body: Any) -> dict[str, Any]:
    """POST /v1/files/presigned: a file record waiting for its bytes, and a presigned S3 PUT
    URL for them (valid for an hour, or less when the credentials that sign it end sooner:
    ``expires_at`` says when). ``POST /v1/files/{id}/complete`` then checks the object's size
    and records its SHA-256; until then the file cannot be used."""
    may_create_file(deps, principal)  # a refused declaration counts, as a refused upload does
    filename, size = declared_file(deps, body)
    record = _input_record(deps, principal, filename, size, pending=True)
    upload = deps.blobs.presigned_put(incoming_key(record.id), size, expires_in=UPLOAD_SECONDS)
    deps.files.create(record)
    return {
        "file": file_object(record),
        "upload_url": upload.url,
        "method": "PUT",
        "headers": {"Content-Length": str(size)},
        "expires_at": record.created_at + upload.seconds,
    }


def complete_presigned(deps: Deps, principal: Principal, file_id: str) -> dict[str, Any]:
    """POST /v1/files/{id}/complete: the presigned upload is done; check it, and copy its
    bytes where the file lives (out of the URL's reach), then record their SHA-256, counted
    against the user's storage limit in the same write. Over the limit (429) the upload is
    kept, to be completed once there is room."""
    record = visible_file(deps, principal, file_id, pending=True)
    size = deps.blobs.size(incoming_key(file_id))
    if size is None:
        raise BadRequest("Nothing was uploaded to the file's URL yet.", code="upload_incomplete")
    if size != record.bytes:
        raise BadRequest(
            f"The upload holds {size} bytes; the file declared {record.bytes}.", code="upload_size_mismatch"
        )
    deps.blobs.copy(incoming_key(file_id), file_key(file_id))
    if deps.blobs.size(file_key(file_id)) != record.bytes:  # replaced between the check and the copy
        deps.blobs.delete(file_key(file_id))
        deps.blobs.delete(incoming_key(file_id))
        raise BadRequest(
            "The upload changed while it was completed; upload it again.", code="upload_size_mismatch"
        )
    digest = hashlib.sha256()
    for chunk in deps.blobs.iter_chunks(file_key(file_id)):
        digest.update(chunk)
    assert record.expires_at is not None
    refused = deps.files.complete_counted(
        record,
        digest.hexdigest(),
        ttl=record.expires_at + 86400,
        limit=storage_limit(deps),
        now=deps.clock(),
    )
    if refused is not None:
        deps.blobs.delete(file_key(file_id))
        raise storage_refusal(deps, refused)
    deps.blobs.delete(incoming_key(file_id))
    return file_object(record)
