"""Webhooks, per the Standard Webhooks spec: signing and verification, event payloads, which events a
job asked for, the retry schedule, and the check that a URL may be called at all (SSRF).

Everything here is pure (which addresses are public: jobs/webhook_addresses.py); the one piece of I/O,
DNS resolution, is a parameter (`Resolver`), so the API (at submission) and the delivery worker (at each
attempt) run the same checks.

Signatures are the `standardwebhooks` package's (`sign`). Kept here: the secret's strict base64 check
(the library drops characters that are not base64), one signature per secret during a rotation, and
`verify`, whose clock and window are parameters (the library reads the wall clock with a fixed five
minutes) and which answers every malformed header with WebhookVerificationError (the library raises
ValueError on a signature without a comma).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
import re
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from standardwebhooks.webhooks import Webhook

from core.errors import InvalidInput, WebhookVerificationError
from core.signing import SECRET_PREFIX
from core.vocabulary import FILTER_OF_EVENT, WebhookEvent
from jobs.webhook_addresses import IPAddress, is_public

SIGNATURE_VERSION = "v1"
TOLERANCE_S = 5 * 60  # the spec's suggested window against replays


# --- signing -----------------------------------------------------------------------------------


def secret_key(secret: str) -> bytes:
    """The HMAC key of a secret: the base64 after the optional 'whsec_' prefix, decoded."""
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error as error:
        raise ValueError("a webhook secret is 'whsec_' followed by base64") from error


def sign(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """'v1,' + base64(HMAC-SHA256(key, f"{msg_id}.{timestamp}.{body}")), by standardwebhooks' `Webhook`,
    the reference library the client verifies with. `body` is UTF-8 (encode_payload's bytes): the
    library signs text; UnicodeDecodeError otherwise."""
    at = datetime.fromtimestamp(timestamp, UTC)
    return Webhook(secret_key(secret)).sign(msg_id, at, body.decode("utf-8"))


def signature_headers(
    secrets: str | Sequence[str], *, msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three headers a delivery carries. Several secrets (a rotation's overlap) give several
    space-separated signatures, the Standard Webhooks way: a receiver holding either secret verifies."""
    keys = [secrets] if isinstance(secrets, str) else list(secrets)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            sign(secret, msg_id=msg_id, timestamp=timestamp, body=body) for secret in keys
        ),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: int = TOLERANCE_S,
    now: float | None = None,
) -> None:
    """Raise WebhookVerificationError unless one of the signatures in `webhook-signature` (a
    space-separated list, so that secrets can rotate) matches and the timestamp is within tolerance.
    `headers` keys are matched case-insensitively."""
    lowered = {key.lower(): value for key, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    raw_timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not msg_id or not raw_timestamp or not signatures:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(raw_timestamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not an integer") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance window")
    try:
        expected = sign(secret, msg_id=msg_id, timestamp=timestamp, body=body)
    except UnicodeDecodeError:
        raise WebhookVerificationError("the body is not UTF-8") from None
    for candidate in signatures.split(" "):
        version, _, _ = candidate.partition(",")
        if version == SIGNATURE_VERSION and hmac.compare_digest(candidate.encode(), expected.encode()):
            return
    raise WebhookVerificationError("no matching signature")


# --- events and payloads -----------------------------------------------------------------------


def message_id(job_id: uuid.UUID, event: WebhookEvent) -> str:
    """The webhook-id: the same for every attempt of one event, so receivers can deduplicate."""
    return f"msg_{job_id.hex}_{FILTER_OF_EVENT[event].value}"


def wants_event(events_filter: Sequence[str], event: WebhookEvent) -> bool:
    return FILTER_OF_EVENT[event].value in events_filter


def event_payload(event: WebhookEvent, data: dict[str, Any], *, at: datetime) -> dict[str, Any]:
    """The body of a delivery: {type, timestamp, data}, data being the job object of GET."""
    return {"type": event.value, "timestamp": at.astimezone(UTC).isoformat(), "data": data}


def encode_payload(payload: dict[str, Any]) -> bytes:
    """The exact bytes that are signed and sent."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


# --- retries -------------------------------------------------------------------------------------


def delay_before(attempt: int, schedule: Sequence[float]) -> float | None:
    """Seconds to wait before attempt `attempt` (1-based); None once the schedule is spent."""
    if attempt < 1 or attempt > len(schedule):
        return None
    return schedule[attempt - 1]


def is_delivered(status_code: int) -> bool:
    return 200 <= status_code < 300


def is_gone(status_code: int) -> bool:
    """410 Gone: the receiver asks never to be called at this URL again."""
    return status_code == 410


# --- URL safety ----------------------------------------------------------------------------------

Resolver = Callable[[str, int], list[str]]  # (host, port) -> addresses as text


class UnsafeWebhookUrl(InvalidInput):
    """The webhook URL is malformed or reaches a host we must not call. Not recoverable."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="webhook")


class UnresolvedWebhookHost(UnsafeWebhookUrl):
    """The webhook host does not resolve now. Refused at submission; retried at delivery (DNS may be
    down for a while)."""


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """A URL that passed the check, and the addresses it was checked against: the delivery
    connects to one of these, so that DNS cannot change its answer in between (rebinding)."""

    url: str
    host: str
    port: int
    addresses: tuple[str, ...]


# A host made only of digits, dots and hex ("0x"), which no DNS name in use is: a numeric IPv4 form.
NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]*))*\.?$", re.IGNORECASE)


def system_resolver(host: str, port: int) -> list[str]:
    """The operating system's resolver. I/O: raises OSError when the name does not resolve."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _allowed(host: str, address: IPAddress, allow_hosts: Sequence[str]) -> bool:
    for entry in allow_hosts:
        if entry.lower() == host.lower():
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue  # a host name entry that is not this host
    return False


def check_webhook_url(url: str, *, allow_hosts: Sequence[str], resolve: Resolver) -> WebhookTarget:
    """Raise UnsafeWebhookUrl unless `url` is http(s) with a host whose every address is public or
    permitted by `allow_hosts` (host names, IPs or CIDRs)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as error:
        raise UnsafeWebhookUrl(f"webhook is not a valid URL: {error}") from None
    if parts.scheme not in ("http", "https"):
        raise UnsafeWebhookUrl("webhook must be an http:// or https:// URL")
    host = parts.hostname
    if not host:
        raise UnsafeWebhookUrl("webhook URL has no host")
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is None and NUMERIC_HOST.match(host):
        # 2130706433, 0177.0.0.1, 0x7f.1, 127.1: inet_aton reads them as addresses (127.0.0.1), and
        # resolvers and HTTP clients differ on how; only canonical literals are accepted.
        raise UnsafeWebhookUrl(
            f"webhook host {host!r} is a non-canonical numeric address: write it as a dotted quad "
            "(e.g. 203.0.113.7) or use a host name"
        )
    if literal is not None:
        texts = [str(literal)]
    else:
        try:
            texts = resolve(host, port)
        except (OSError, UnicodeError):
            raise UnresolvedWebhookHost(f"webhook host {host!r} does not resolve") from None
        if not texts:
            raise UnresolvedWebhookHost(f"webhook host {host!r} does not resolve")
    for text in texts:
        address = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
        if not is_public(address) and not _allowed(host, address, allow_hosts):
            raise UnsafeWebhookUrl(
                f"webhook host {host!r} resolves to {address}, which is no public unicast address (loopback, "
                "private, link-local, another special-purpose block, or IPv4 inside IPv6 that is one); such "
                "hosts are refused unless REPRISE_WEBHOOK_ALLOW_HOSTS lists them"
            )
    return WebhookTarget(url=url, host=host, port=port, addresses=tuple(texts))
