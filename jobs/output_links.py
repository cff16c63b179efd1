"""Signed output links: a URL to a succeeded job's image or video that works without the API key until
it expires, so that a webhook receiver can hand the output to a system that holds no key (as
Replicate's and OpenAI's output URLs do, which also last an hour).

A link is `/v1/outputs/{job_id}?expires=<unix seconds>&signature=<base64url>`, the signature an
HMAC-SHA256 of `reprise-output-link.v1.{job_id}.{expires}` keyed with the tenant's webhook signing
secret (jobs.webhooks.secret_key): only the server and the tenant hold it, and a link stays valid
across a secret rotation's overlap, when both secrets are checked. The delivery worker signs (a
webhook event's `signed_output`, beside its data); the API checks (api/routes/outputs.py). Pure: the
clock is a parameter.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from jobs.webhooks import secret_key

LINK_PREFIX = "/v1/outputs"
DOMAIN = "reprise-output-link.v1"  # kept apart from the webhook signatures made with the same key


class LinkCheck(enum.Enum):
    VALID = "valid"
    INVALID = "invalid"  # wrong signature, or for another job: 403
    EXPIRED = "expired"  # signed by us, past its expiry: 410


def link_signature(secret: str, job_id: uuid.UUID, expires: int) -> str:
    message = f"{DOMAIN}.{job_id}.{expires}".encode()
    digest = hmac.new(secret_key(secret), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def signed_output(
    *, job_id: uuid.UUID, secret: str, base_url: str, ttl_s: float, now: datetime
) -> dict[str, Any]:
    """A webhook's `signed_output`: {url, expires_at}, the link valid for `ttl_s` seconds from `now`."""
    expires = int(now.timestamp() + ttl_s)
    signature = link_signature(secret, job_id, expires)
    return {
        "url": f"{base_url}{LINK_PREFIX}/{job_id}?expires={expires}&signature={signature}",
        "expires_at": datetime.fromtimestamp(expires, UTC).isoformat(),
    }


def check_link(
    *, secrets: Sequence[str], job_id: uuid.UUID, expires: int, signature: str, now: datetime
) -> LinkCheck:
    """Whether a link is ours and current: the signature first (a forged link is INVALID whatever its
    expiry), then the expiry."""
    signed = any(
        hmac.compare_digest(link_signature(secret, job_id, expires), signature) for secret in secrets
    )
    if not signed:
        return LinkCheck.INVALID
    return LinkCheck.VALID if now.timestamp() < expires else LinkCheck.EXPIRED
