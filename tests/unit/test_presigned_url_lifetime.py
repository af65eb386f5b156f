"""Presigned URLs never outlive the credentials that sign them (signing is local: no AWS)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import botocore.session
import pytest
from batchgw.storage.blobs import BlobStore, SigningExpiring, UrlSigning
from botocore.config import Config
from botocore.credentials import Credentials, RefreshableCredentials

NOW = time.time()


@pytest.fixture(autouse=True)
def _now() -> None:
    """botocore checks a refreshable key's expiry against the real clock: each test starts
    from the time it runs, not from when the module was imported (a long suite in between)."""
    global NOW
    NOW = float(int(time.time()))  # whole seconds: an expiry as a datetime keeps them exactly


class _Given:
    """A credential provider that hands the session the credentials a test made."""

    METHOD = "test"
    CANONICAL_NAME = "test"

    def __init__(self, credentials: Any) -> None:
        self.credentials = credentials

    def load(self) -> Any:
        return self.credentials


def _store(credentials: Any, **signing: Any) -> BlobStore:
    """A BlobStore whose S3 client signs with ``credentials``, the way ``deps`` wires it."""
    core = botocore.session.Session()
    core.get_component("credential_provider").insert_before("env", _Given(credentials))
    session = boto3.session.Session(botocore_session=core, region_name="us-east-1")
    client = session.client("s3", config=Config(signature_version="s3v4"))
    rules = {"margin_seconds": 60, "min_seconds": 60, "clock": lambda: NOW, **signing}
    return BlobStore(client, "data", UrlSigning(session.get_credentials, **rules))


def _expiring(access_key: str, seconds: float, refresh: Any = None) -> RefreshableCredentials:
    return RefreshableCredentials(
        access_key,
        "secret",
        "token",
        datetime.fromtimestamp(NOW + seconds, UTC),
        refresh_using=refresh or (lambda: pytest.fail("refreshed")),
        method="test",
    )


def _signed(url: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}


def test_a_download_url_ends_a_margin_before_the_role_credentials_that_sign_it() -> None:
    blobs = _store(_expiring("ASIAROLE", 1200))

    url = blobs.presigned_get("files/x", expires_in=3600)

    assert url.seconds == 1140
    query = _signed(url.url)
    assert query["X-Amz-Expires"] == "1140"
    assert query["X-Amz-Credential"].startswith("ASIAROLE/") and query["X-Amz-Security-Token"] == "token"


def test_an_upload_url_asked_for_less_than_the_credentials_last_keeps_its_length() -> None:
    blobs = _store(_expiring("ASIAROLE", 7200))

    url = blobs.presigned_put("incoming/x", 10, expires_in=3600)

    assert url.seconds == 3600 and _signed(url.url)["X-Amz-Expires"] == "3600"


def test_credentials_near_their_end_are_refreshed_before_the_url_is_signed() -> None:
    fresh = {
        "access_key": "ASIAFRESH",
        "secret_key": "secret2",
        "token": "token2",
        "expiry_time": (datetime.fromtimestamp(NOW, UTC) + timedelta(seconds=1800)).isoformat(),
    }
    blobs = _store(_expiring("ASIASTALE", 300, refresh=lambda: fresh))  # within botocore's 10 minutes

    url = blobs.presigned_get("files/x", expires_in=3600)

    assert url.seconds == 1740
    assert _signed(url.url)["X-Amz-Credential"].startswith("ASIAFRESH/")


def test_environment_credentials_end_when_aws_credential_expiration_says() -> None:
    stated = datetime.fromtimestamp(NOW + 900, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    blobs = _store(
        Credentials("ASIAENV", "secret", "token", method="env"),
        environ={"AWS_CREDENTIAL_EXPIRATION": stated},
        clock=lambda: float(int(NOW)),  # the stated time has whole seconds
    )

    assert blobs.presigned_get("files/x").seconds == 840


def test_long_lived_keys_sign_for_as_long_as_asked() -> None:
    blobs = _store(
        Credentials("AKIALONG", "secret", method="shared-credentials-file"),
        environ={"AWS_CREDENTIAL_EXPIRATION": "2000-01-01T00:00:00Z"},  # about other credentials
    )

    assert blobs.presigned_get("files/x", expires_in=3600).seconds == 3600


def test_credentials_too_close_to_their_end_refuse_to_sign_with_503() -> None:
    blobs = _store(
        Credentials("ASIAENV", "secret", "token", method="env"),
        environ={"AWS_CREDENTIAL_EXPIRATION": datetime.fromtimestamp(NOW + 100, UTC).isoformat()},
    )

    with pytest.raises(SigningExpiring) as refused:
        blobs.presigned_get("files/x")

    assert refused.value.status == 503 and refused.value.code == "signing_unavailable"


def test_temporary_credentials_of_unstated_expiry_sign_for_at_most_the_unknown_expiry_cap() -> None:
    # Lambda's execution role: a session token in the environment, no expiry stated
    blobs = _store(
        Credentials("ASIALAMBDA", "secret", "token", method="env"), environ={}, unknown_seconds=900
    )

    assert blobs.presigned_get("files/x", expires_in=3600).seconds == 900
    assert blobs.presigned_get("files/x", expires_in=300).seconds == 300
