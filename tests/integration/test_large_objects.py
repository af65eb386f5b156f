"""Objects over 8 MiB (s3transfer's multipart threshold) read back through the S3 adapter with
botocore's checksum validation on (its default since 1.36): written streamed, written part by
part as result files are, and copied as a batch copies its input file. Each object's checksum is
the one S3 computes for how it was made: the whole object's CRC32 for one PUT or a copy, the
composite ``<crc32 of the parts' crc32s>-<parts>`` for a multipart upload."""

from __future__ import annotations

import base64
import os
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from batchgw.storage import aws
from batchgw.storage.blobs import BlobStore

MiB = 1024 * 1024
TRANSFER_PART = 8 * MiB  # s3transfer's default multipart threshold and part size
BUCKET = "large-objects"

pytestmark = pytest.mark.usefixtures("aws_env")


@pytest.fixture
def s3() -> Any:
    client = aws.get_clients().s3
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def blobs(s3: Any) -> BlobStore:
    return BlobStore(s3, BUCKET)


def crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def composite_crc32(parts: list[bytes]) -> str:
    """S3's composite checksum of a multipart object: the CRC32 of its parts' CRC32s, '-N'."""
    joined = b"".join(zlib.crc32(part).to_bytes(4, "big") for part in parts)
    return f"{crc32(joined)}-{len(parts)}"


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def stored_checksum(s3: Any, key: str) -> tuple[str, str | None]:
    """The object's CRC32 and checksum type as a whole-object GET answers them."""
    got = s3.get_object(Bucket=BUCKET, Key=key, ChecksumMode="ENABLED")
    got["Body"].read()
    return got["ChecksumCRC32"], got.get("ChecksumType")


@pytest.mark.parametrize("size", [9 * MiB, 12 * MiB + 17])
def test_a_streamed_object_over_8_mib_and_its_copy_read_back_whole(
    s3: Any, blobs: BlobStore, size: int
) -> None:
    data = os.urandom(size)
    assert blobs.put_chunks("files/big", pieces(data, MiB)) == size

    assert blobs.get("files/big") == data
    assert b"".join(blobs.iter_chunks("files/big")) == data
    assert stored_checksum(s3, "files/big") == (
        composite_crc32(list(pieces(data, TRANSFER_PART))),
        "COMPOSITE",
    )

    blobs.copy("files/big", "inputs/b/input.jsonl")  # what a file batch does with its input
    assert blobs.get("inputs/b/input.jsonl") == data  # failed with FlexibleChecksumError
    assert b"".join(blobs.iter_chunks("inputs/b/input.jsonl", 256 * 1024)) == data
    assert stored_checksum(s3, "inputs/b/input.jsonl") == (crc32(data), "FULL_OBJECT")


def test_a_copy_of_a_copy_and_of_a_single_put_keep_whole_object_checksums(s3: Any, blobs: BlobStore) -> None:
    data = os.urandom(3 * MiB)
    blobs.put("incoming/f", data)
    blobs.copy("incoming/f", "files/f")
    blobs.copy("files/f", "inputs/f/input.jsonl")
    assert blobs.get("inputs/f/input.jsonl") == data
    assert stored_checksum(s3, "inputs/f/input.jsonl")[0] == crc32(data)


def test_an_object_written_part_by_part_as_a_result_file_reads_back_whole(s3: Any, blobs: BlobStore) -> None:
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(MiB + 3)]
    upload = blobs.start_multipart("exports/b/output.jsonl", "application/jsonl")
    for number, part in enumerate(parts, start=1):
        blobs.upload_part("exports/b/output.jsonl", upload, number, part)
    blobs.complete_multipart("exports/b/output.jsonl", upload)
    blobs.complete_multipart("exports/b/output.jsonl", upload)  # again: a no-op

    assert blobs.get("exports/b/output.jsonl") == b"".join(parts)
    assert stored_checksum(s3, "exports/b/output.jsonl") == (composite_crc32(parts), "COMPOSITE")
    blobs.copy("exports/b/output.jsonl", "exports/b/copy.jsonl")
    assert blobs.get("exports/b/copy.jsonl") == b"".join(parts)


def test_a_copy_that_names_no_checksum_keeps_the_sources_composite_one_as_s3_does(
    s3: Any, blobs: BlobStore
) -> None:
    # local.moto_patches 14: moto 5.2.5 dropped the type and part count of a copied checksum,
    # so the copy claimed the composite value as its bytes' CRC32 and every read of it failed.
    data = os.urandom(9 * MiB)
    blobs.put_chunks("files/raw", pieces(data, MiB))
    s3.copy_object(Bucket=BUCKET, Key="files/raw-copy", CopySource={"Bucket": BUCKET, "Key": "files/raw"})
    assert blobs.get("files/raw-copy") == data
    assert stored_checksum(s3, "files/raw-copy") == stored_checksum(s3, "files/raw")
