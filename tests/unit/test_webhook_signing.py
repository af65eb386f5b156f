"""Webhook deliveries are signed as Standard Webhooks are: the OpenAI SDK's own verifier
accepts them, with the event in OpenAI's shape, and refuses a tampered body."""

from __future__ import annotations

import json
import time

import openai
import pytest
from batchgw.domain.webhooks import EVENT_TYPES, event_body, new_secret, signature_header


def delivery(secrets: list[str], event_type: str = "batch.completed") -> tuple[bytes, dict[str, str]]:
    now = int(time.time())
    body = json.dumps(event_body("evt_1", event_type, now, "batch_abc")).encode()
    headers = {
        "webhook-id": "evt_1",
        "webhook-timestamp": str(now),
        "webhook-signature": signature_header(secrets, "evt_1", now, body),
    }
    return body, headers


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES.values()))
def test_the_openai_sdk_verifies_and_reads_each_event_type(event_type: str) -> None:
    secret = new_secret(bytes(range(32)))
    body, headers = delivery([secret], event_type)
    event = openai.OpenAI(api_key="x").webhooks.unwrap(body, headers, secret=secret)
    assert (event.type, event.data.id, event.id) == (event_type, "batch_abc", "evt_1")


def test_after_a_rotation_either_secret_verifies_the_same_delivery() -> None:
    old, new = new_secret(b"o" * 32), new_secret(b"n" * 32)
    body, headers = delivery([new, old])
    client = openai.OpenAI(api_key="x")
    for secret in (old, new):
        client.webhooks.verify_signature(body, headers, secret=secret)


def test_a_tampered_body_or_another_secret_is_refused() -> None:
    secret = new_secret(b"s" * 32)
    body, headers = delivery([secret])
    client = openai.OpenAI(api_key="x")
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.verify_signature(body.replace(b"abc", b"abd"), headers, secret=secret)
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.verify_signature(body, headers, secret=new_secret(b"t" * 32))


def test_a_secret_is_24_to_64_random_bytes() -> None:
    assert new_secret(b"x" * 24).startswith("whsec_")
    for size in (23, 65):
        with pytest.raises(ValueError):
            new_secret(b"x" * size)
