"""S3: batch inputs, request and response bodies too large for their record, files.

Every object carries a CRC32 checksum that S3 computed as it stored it, and botocore (1.36 on)
sends one with each write and checks it on each whole-object read (``request_checksum_calculation``
and ``response_checksum_validation`` ``when_supported``). What the checksum covers depends on how
the object was made, as on S3:

- one PUT (``put``, a presigned PUT, a stream of at most 8 MiB): the whole object's CRC32
  (``FULL_OBJECT``), checked on every read;
- a multipart upload (``put_stream`` and ``put_chunks`` above 8 MiB, s3transfer's parts; result
  files, ``start_multipart``): ``COMPOSITE``, the CRC32 of the parts' CRC32s, read back as
  ``<value>-<parts>``; the SDK checks each part as it is sent and cannot check the whole on a
  read, so it does not (``CHECKSUM_ALGORITHM`` is declared when the upload starts, and each part's
  checksum is named again when it completes, as S3 requires of an upload that declared one);
- a server-side copy (``copy``): the copy's own whole-object CRC32, asked for with the copy
  (S3 would otherwise copy the source's checksum, a composite one included).

A presigned URL acts with the credentials that signed it, and stops working when they
expire, whatever its own expiry says. So a URL is signed for at most what is left of its
credentials' life, less a margin (``UrlSigning``): shorter than asked when they end sooner,
and refused (503) when what is left is shorter than the shortest URL worth handing out.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from botocore.exceptions import BotoCoreError, ClientError

from batchgw.domain import codec
from batchgw.domain.batch import BatchRecord
from batchgw.domain.errors import ServiceUnavailable, StorageError

# The checksum S3 stores with every object the gateway writes (botocore's default, named so that
# multipart uploads and copies declare the one their parts are sent with).
CHECKSUM_ALGORITHM = "CRC32"

# Where Lambda-style environments say when the credentials they hand over expire (ISO 8601).
CREDENTIAL_EXPIRATION_ENV = "AWS_CREDENTIAL_EXPIRATION"


def input_key(batch_id: str) -> str:
    return f"inputs/{batch_id}/requests.jsonl.gz"


def body_key(batch_id: str, index: int, kind: str) -> str:
    return f"bodies/{batch_id}/{index}.{kind}.json"


def input_file_key(batch_id: str) -> str:
    """A file batch's own copy of its input file."""
    return f"inputs/{batch_id}/input.jsonl"


def own_input_key(batch: BatchRecord) -> str:
    """Where the batch keeps its own copy of its input: its requests as the create checked
    them (gzipped JSONL of custom_id, model and body), or its file's bytes."""
    return input_file_key(batch.id) if batch.input_method == "file" else input_key(batch.id)


def export_key(batch_id: str) -> str:
    return f"exports/{batch_id}/output.jsonl"


@dataclass(frozen=True)
class Presigned:
    """A presigned URL and how many seconds it is valid for from when it was signed."""

    url: str
    seconds: int


class SigningExpiring(ServiceUnavailable):
    """The credentials that sign URLs end too soon for a URL worth handing out."""

    def __init__(self, seconds_left: float) -> None:
        super().__init__(
            "Downloads and uploads cannot be signed for now; try again in a minute.",
            code="signing_unavailable",
        )
        self.seconds_left = seconds_left


@dataclass(frozen=True)
class UrlSigning:
    """How long a presigned URL may be valid, given the credentials that sign it.

    ``credentials`` gives the client's botocore credentials (the session's
    ``get_credentials``); their expiry is known for refreshable ones (role, container, SSO,
    environment variables with ``AWS_CREDENTIAL_EXPIRATION``), else from that variable when
    they came from the environment. Temporary credentials (a session token) of an unknown
    expiry — Lambda's execution role states none — sign for at most ``unknown_seconds``;
    long-lived keys sign for what is asked. ``clock`` is the wall clock botocore signs with.
    """

    credentials: Callable[[], Any] = lambda: None
    margin_seconds: float = 60
    min_seconds: float = 60
    unknown_seconds: int = 900
    clock: Callable[[], float] = time.time
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def seconds(self, wanted: int) -> int:
        """The URL's lifetime: ``wanted``, or less when the credentials end sooner (less the
        margin). Raises SigningExpiring when that is under ``min_seconds``."""
        left = self.credentials_left()
        if left is None:
            return min(wanted, self.unknown_seconds) if self._temporary() else wanted
        usable = math.floor(left - self.margin_seconds)
        if usable < self.min_seconds:
            raise SigningExpiring(left)
        return min(wanted, usable)

    def _temporary(self) -> bool:
        credentials = self.credentials()
        return credentials is not None and bool(credentials.get_frozen_credentials().token)

    def credentials_left(self) -> float | None:
        """Seconds until the signing credentials expire; None when that is not known."""
        credentials = self.credentials()
        if credentials is None:
            return None
        credentials.get_frozen_credentials()  # refreshed first if near their end, as signing does
        expiry: datetime | None = getattr(credentials, "_expiry_time", None)  # RefreshableCredentials
        if expiry is None and getattr(credentials, "method", None) == "env":
            expiry = _stated_expiry(self.environ.get(CREDENTIAL_EXPIRATION_ENV))
        if expiry is None:
            return None
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=UTC)
        return expiry.timestamp() - self.clock()


def _stated_expiry(text: str | None) -> datetime | None:
    """An ISO 8601 expiry as the environment states it; None when absent or unreadable."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None


class BlobStore:
    def __init__(self, client: Any, bucket: str, signing: UrlSigning | None = None) -> None:
        self._s3 = client
        self._bucket = bucket
        self._signing = signing or UrlSigning()

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        try:
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=data, ContentType=content_type)
        except ClientError as exc:
            raise StorageError(f"could not write s3://{self._bucket}/{key}") from exc

    def get(self, key: str) -> bytes:
        try:
            return bytes(self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read())
        except ClientError as exc:
            raise StorageError(f"could not read s3://{self._bucket}/{key}") from exc

    def put_lines_gz(self, key: str, lines: list[bytes]) -> int:
        """Store ``lines`` as one gzipped JSONL object: the bytes it takes."""
        data = gzip.compress(b"\n".join(lines) + b"\n", compresslevel=1)
        self.put(key, data, "application/gzip")
        return len(data)

    def iter_lines_gz(self, key: str) -> Iterator[bytes]:
        """The lines of a gzipped JSONL object, streamed (bounded memory)."""
        try:
            body = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"]
        except ClientError as exc:
            raise StorageError(f"could not read s3://{self._bucket}/{key}") from exc
        with gzip.GzipFile(fileobj=body) as stream:
            for line in stream:
                line = line.rstrip(b"\n")
                if line:
                    yield line

    def put_chunks(self, key: str, chunks: Iterable[bytes], content_type: str = "application/jsonl") -> int:
        """Upload the concatenation of ``chunks``, streamed (multipart when large): its bytes."""
        size = 0

        def counted() -> Iterator[bytes]:
            nonlocal size
            for chunk in chunks:
                size += len(chunk)
                yield chunk

        self.put_stream(key, io.BufferedReader(_Reader(counted())), content_type)
        return size

    def put_stream(self, key: str, stream: IO[bytes], content_type: str = "application/jsonl") -> None:
        """Upload a file object of any size (multipart above 8 MiB, with a composite CRC32)."""
        extra = {"ContentType": content_type, "ChecksumAlgorithm": CHECKSUM_ALGORITHM}
        try:
            self._s3.upload_fileobj(stream, self._bucket, key, ExtraArgs=extra)
        except ClientError as exc:
            raise StorageError(f"could not write s3://{self._bucket}/{key}") from exc

    # --- multipart uploads: large objects written part by part ---------------------------

    def start_multipart(self, key: str, content_type: str) -> str:
        """Begin a multipart upload of ``key``; its upload id. The upload declares the checksum
        its parts are sent with (S3 refuses a part whose checksum the upload did not declare)."""
        try:
            started = self._s3.create_multipart_upload(
                Bucket=self._bucket, Key=key, ContentType=content_type, ChecksumAlgorithm=CHECKSUM_ALGORITHM
            )
            return str(started["UploadId"])
        except ClientError as exc:
            raise StorageError(f"could not start writing s3://{self._bucket}/{key}") from exc

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> None:
        """Upload part ``number`` (from 1; every part but the last at least 5 MiB on AWS).
        Uploading a part again replaces it."""
        try:
            self._s3.upload_part(
                Bucket=self._bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data,
                ChecksumAlgorithm=CHECKSUM_ALGORITHM,
            )
        except ClientError as exc:
            raise StorageError(f"could not write part {number} of s3://{self._bucket}/{key}") from exc

    def complete_multipart(self, key: str, upload_id: str) -> None:
        """Join the upload's parts into the object (each named with its ETag and its checksum,
        as S3 requires of an upload that declared one). Completing an upload completed already
        (by a try whose answer was lost) is a no-op once the object exists."""
        checksum = f"Checksum{CHECKSUM_ALGORITHM}"
        try:
            parts = [
                {"PartNumber": part["PartNumber"], "ETag": part["ETag"]}
                | ({checksum: part[checksum]} if checksum in part else {})
                for page in self._s3.get_paginator("list_parts").paginate(
                    Bucket=self._bucket, Key=key, UploadId=upload_id
                )
                for part in page.get("Parts", [])
            ]
            self._s3.complete_multipart_upload(
                Bucket=self._bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchUpload" and self.size(key) is not None:
                return
            raise StorageError(f"could not complete s3://{self._bucket}/{key}") from exc

    def delete(self, key: str) -> None:
        self._s3.delete_object(Bucket=self._bucket, Key=key)

    def copy(self, source: str, target: str) -> None:
        """Server-side copy (a batch keeps its own copy of its input file). The copy is one
        object made by one request, so it gets its own whole-object checksum: without
        ``ChecksumAlgorithm`` S3 would copy the source's, which for a multipart source is
        composite (of its parts), not the CRC32 of the copy's bytes."""
        try:
            self._s3.copy_object(
                Bucket=self._bucket,
                Key=target,
                CopySource={"Bucket": self._bucket, "Key": source},
                ChecksumAlgorithm=CHECKSUM_ALGORITHM,
            )
        except ClientError as exc:
            raise StorageError(f"could not copy s3://{self._bucket}/{source}") from exc

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def presigned_put(self, key: str, size: int, expires_in: int = 3600) -> Presigned:
        """A URL that uploads exactly ``size`` bytes to ``key``, valid for ``expires_in``
        seconds or less (see ``UrlSigning``)."""
        seconds = self._signing.seconds(expires_in)
        url = self._s3.generate_presigned_url(
            "put_object",
            Params={"Bucket": self._bucket, "Key": key, "ContentLength": size},
            ExpiresIn=seconds,
        )
        return Presigned(str(url), seconds)

    def size(self, key: str) -> int | None:
        """The object's size, None when there is none: read as a listing of ``key`` as a
        prefix (its first entry is ``key`` itself when that exists), so the roles list the
        bucket only under their own prefixes (``s3:prefix``) and a missing key is never a 403."""
        try:
            page = self._s3.list_objects_v2(Bucket=self._bucket, Prefix=key, MaxKeys=1)
        except ClientError as exc:
            raise StorageError(f"could not read s3://{self._bucket}/{key}") from exc
        found = page.get("Contents") or []
        return int(found[0]["Size"]) if found and found[0]["Key"] == key else None

    def load_body(self, packed: bytes | None, ref: str | None) -> Any:
        """A body kept packed in its record, or in S3 under ``ref``; None when neither."""
        if packed is not None:
            return codec.unpack(packed)
        if ref is not None:
            return codec.unpack(self.get(ref))
        return None

    def iter_chunks(self, key: str, chunk: int = 1024 * 1024) -> Iterator[bytes]:
        """The object's bytes, streamed. Raises StorageError when it cannot be read, before
        or while streaming (a read cut off, a checksum that does not match)."""
        try:
            body = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"]
            yield from body.iter_chunks(chunk)
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"could not read s3://{self._bucket}/{key}") from exc

    def presigned_get(self, key: str, expires_in: int = 3600) -> Presigned:
        """A URL that downloads ``key``, valid for ``expires_in`` seconds or less (see
        ``UrlSigning``)."""
        seconds = self._signing.seconds(expires_in)
        url = self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": self._bucket, "Key": key}, ExpiresIn=seconds
        )
        return Presigned(str(url), seconds)

    def delete_batch(self, batch_id: str) -> None:
        for prefix in (f"inputs/{batch_id}/", f"bodies/{batch_id}/", f"exports/{batch_id}/"):
            self.delete_prefix(prefix)

    def delete_prefix(self, prefix: str) -> None:
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._bucket, Prefix=prefix):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": keys, "Quiet": True})


class _Reader(io.RawIOBase):
    """A read-only stream over an iterable of byte strings (for a streamed upload)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size
