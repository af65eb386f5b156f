"""The data bucket's lifecycle rules, applied locally (moto keeps rules but never applies
them): objects under an expiring prefix older than its days are deleted, as S3 would.

The local stack runs ``apply_rules`` every few seconds. A "day" is
``BATCHGW_LOCAL_DAY_SECONDS`` long (86,400 unless a test shrinks it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from batchgw.config.resources import BucketSpec

DAY_SECONDS_ENV = "BATCHGW_LOCAL_DAY_SECONDS"


def day_seconds(env: Mapping[str, str]) -> float:
    return float(env.get(DAY_SECONDS_ENV, "86400"))


def apply_rules(s3: Any, bucket: str, spec: BucketSpec, *, now: datetime, day: float) -> list[str]:
    """Delete the objects the bucket's expiry rules have expired; the deleted keys."""
    expired: list[str] = []
    for prefix, days in spec.expire_prefixes.items():
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                if (now - item["LastModified"]).total_seconds() >= days * day:
                    expired.append(item["Key"])
    for start in range(0, len(expired), 1000):
        chunk = [{"Key": key} for key in expired[start : start + 1000]]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True})
    return expired
