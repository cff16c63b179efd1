"""The client's webhook check is Standard Webhooks' reference library: the server's signatures (also
during a secret rotation, with two signatures) must verify with it, and a tampered delivery must not."""

from __future__ import annotations

import time

import pytest
from reprise_client import verify_webhook
from standardwebhooks.webhooks import WebhookVerificationError

from core.signing import generate_secret
from jobs.webhooks import signature_headers

BODY = b'{"type":"generation.completed","timestamp":"2026-11-25T08:00:00Z","data":{"id":"j1"}}'


def test_a_server_signature_verifies_with_the_reference_library() -> None:
    secret = generate_secret()
    headers = signature_headers([secret], msg_id="msg_1", timestamp=int(time.time()), body=BODY)
    event = verify_webhook(secret, headers, BODY)
    assert event["type"] == "generation.completed" and event["data"]["id"] == "j1"


def test_during_a_rotation_either_secret_verifies() -> None:
    old, new = generate_secret(), generate_secret()
    headers = signature_headers([new, old], msg_id="msg_2", timestamp=int(time.time()), body=BODY)
    assert verify_webhook(old, headers, BODY)["data"]["id"] == "j1"
    assert verify_webhook(new, headers, BODY)["data"]["id"] == "j1"


@pytest.mark.parametrize("tamper", ["body", "secret", "stale"])
def test_a_tampered_delivery_is_refused(tamper: str) -> None:
    secret = generate_secret()
    sent_at = int(time.time()) - (600 if tamper == "stale" else 0)  # the library allows five minutes
    headers = signature_headers([secret], msg_id="msg_3", timestamp=sent_at, body=BODY)
    body = BODY.replace(b"j1", b"j2") if tamper == "body" else BODY
    with pytest.raises(WebhookVerificationError):
        verify_webhook(generate_secret() if tamper == "secret" else secret, headers, body)
