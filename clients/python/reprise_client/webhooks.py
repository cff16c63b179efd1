"""Verifying a webhook delivery: Reprise signs with Standard Webhooks, so its reference library checks it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from standardwebhooks.webhooks import Webhook


def verify_webhook(secret: str, headers: Mapping[str, str], body: bytes | str) -> dict[str, Any]:
    """The event (`{type, timestamp, data}`) when the signature, id and timestamp check out; raises
    standardwebhooks.webhooks.WebhookVerificationError otherwise (a wrong secret, a replay older than
    five minutes, a changed body). `secret` is the tenant's `whsec_...` secret."""
    text = body.decode() if isinstance(body, bytes) else body
    Webhook(secret).verify(text, {key.lower(): value for key, value in headers.items()})
    event: dict[str, Any] = json.loads(text)
    return event
