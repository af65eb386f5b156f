"""Settings: defaults, and the limits the platform sets."""

from __future__ import annotations

import json

import pytest
from batchgw.config.settings import MULTIPART_FRAMING_BYTES, PLATFORM_MAX_BODY_MB, Settings

from local.adapter import LAMBDA_MAX_REQUEST, build_event


def test_the_request_body_limit_defaults_to_what_api_gateway_and_lambda_take() -> None:
    assert Settings.model_validate({}).batch_max_body_mb == 4


def test_a_request_body_limit_the_platform_cannot_carry_is_refused_with_where_to_go_instead() -> None:
    with pytest.raises(RuntimeError, match="Uploads API or a presigned upload"):
        Settings.from_env({"BATCH_MAX_BODY_MB": "32"})
    with pytest.raises(RuntimeError, match="BATCH_MAX_BODY_MB"):
        Settings.from_env({"BATCH_MAX_BODY_MB": "4.5"})  # its base64 alone is 6,291,456 bytes
    assert Settings.from_env({"BATCH_MAX_BODY_MB": "4.4"}).batch_max_body_mb == 4.4


def test_a_part_of_the_largest_allowed_size_in_its_framing_fits_lambdas_invoke_payload() -> None:
    """The event API Gateway hands Lambda for an upload part of PLATFORM_MAX_BODY_MB, with all
    the framing allowed and API Gateway's largest headers, stays under Lambda's 6 MB."""
    part = int(PLATFORM_MAX_BODY_MB * 1024 * 1024)
    body = b"\xff" * (part + MULTIPART_FRAMING_BYTES)  # binary: base64-encoded in the event
    headers = [("Content-Type", "multipart/form-data; boundary=b"), ("X-Pad", "p" * 10_000)]
    event = build_event(
        method="POST", target="/v1/uploads/upload_x/parts", headers=headers, body=body, source_ip="1.2.3.4"
    )
    assert event["isBase64Encoded"] is True
    assert len(json.dumps(event).encode()) <= LAMBDA_MAX_REQUEST


@pytest.mark.parametrize(
    "name", ["BATCH_WORKER_TIMEOUT_SECONDS", "BATCH_LEASE_SECONDS", "BATCH_PREPARE_LEASE_SECONDS"]
)
def test_a_life_or_lease_longer_than_lambdas_longest_timeout_is_refused(name: str) -> None:
    """The workflow's waits for running work are sized on these bounds."""
    with pytest.raises(RuntimeError, match=name):
        Settings.from_env({name: "901"})
    assert Settings.from_env({name: "900"}).model_dump(by_alias=True)[name] == 900
