"""Signed output links: a URL to a succeeded job's image or video that works without the API key until
it expires, so that a webhook receiver can hand the output to a system that holds no key (as
Replicate's and OpenAI's output URLs do, which also last an hour).

A link is `/v1/outputs/{job_id}?expires=<unix seconds>&signature=<base64url>`, the signature an
HMAC-SHA256 of `reprise-output-link.v1.{job_id}.{expires}` keyed with the server's link key
(REPRISE_OUTPUT_LINK_KEY, core.server_keys): only the server can make one. A tenant's webhook secret,
which every receiver of its webhooks holds, signs nothing here. A link whose expiry lies further than
REPRISE_OUTPUT_LINK_MAX_TTL_S from now is refused whatever its signature, so that no link outlives the
cap the operator set, even one made before the cap was lowered. The delivery worker and the OpenAI
images route sign; the API checks (api/routes/outputs.py). Pure: the key and the clock are parameters.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import uuid
from datetime import UTC, datetime
from typing import Any

LINK_PREFIX = "/v1/outputs"
DOMAIN = "reprise-output-link.v1"  # one key, one purpose: kept apart from any other HMAC of ours


class LinkCheck(enum.Enum):
    VALID = "valid"
    INVALID = "invalid"  # wrong signature, or for another job: 403
    BEYOND_CAP = "beyond-cap"  # expires further ahead than the server allows any link to live: 403
    EXPIRED = "expired"  # signed by us, past its expiry: 410


def link_signature(key: bytes, job_id: uuid.UUID, expires: int) -> str:
    message = f"{DOMAIN}.{job_id}.{expires}".encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def signed_output(
    *, job_id: uuid.UUID, key: bytes, base_url: str, ttl_s: float, now: datetime
) -> dict[str, Any]:
    """A webhook's `signed_output`: {url, expires_at}, the link valid for `ttl_s` seconds from `now`."""
    expires = int(now.timestamp() + ttl_s)
    signature = link_signature(key, job_id, expires)
    return {
        "url": f"{base_url}{LINK_PREFIX}/{job_id}?expires={expires}&signature={signature}",
        "expires_at": datetime.fromtimestamp(expires, UTC).isoformat(),
    }


def check_link(
    *, key: bytes, job_id: uuid.UUID, expires: int, signature: str, now: datetime, max_ttl_s: float
) -> LinkCheck:
    """Whether a link is ours and current: the signature first (a forged link is INVALID whatever its
    expiry), then the cap on its life, then the expiry."""
    if not hmac.compare_digest(link_signature(key, job_id, expires), signature):
        return LinkCheck.INVALID
    if expires - now.timestamp() > max_ttl_s:
        return LinkCheck.BEYOND_CAP
    return LinkCheck.VALID if now.timestamp() < expires else LinkCheck.EXPIRED
