"""Standard Webhooks signing and verification, event selection, the retry schedule, URL safety."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from datetime import UTC, datetime

import pytest

from core.errors import InvalidInput, WebhookVerificationError
from core.signing import generate_secret
from core.vocabulary import WebhookEvent
from jobs.webhooks import (
    check_webhook_url,
    delay_before,
    encode_payload,
    event_payload,
    is_delivered,
    is_gone,
    message_id,
    secret_key,
    sign,
    signature_headers,
    verify,
    wants_event,
)

# The test vector of the Standard Webhooks reference libraries (libraries/*/tests).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_sign_matches_the_spec_test_vector() -> None:
    assert sign(SPEC_SECRET, msg_id=SPEC_MSG_ID, timestamp=SPEC_TIMESTAMP, body=SPEC_BODY) == SPEC_SIGNATURE


def test_sign_is_the_hmac_of_id_timestamp_and_body_whatever_the_text() -> None:
    """standardwebhooks signs text: a body with non-ASCII characters signs as its UTF-8 bytes, as the
    HMAC computed by hand (this module's signing before it used the library) does."""
    secret = generate_secret()
    body = encode_payload({"prompt": "un café à Kyōto 🌸", "n": 1})
    by_hand = hmac.new(secret_key(secret), b"msg_9.1700000000." + body, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(by_hand).decode("ascii")
    assert sign(secret, msg_id="msg_9", timestamp=1700000000, body=body) == expected


def test_verify_refuses_a_body_that_is_not_utf8() -> None:
    headers = signature_headers(SPEC_SECRET, msg_id=SPEC_MSG_ID, timestamp=SPEC_TIMESTAMP, body=SPEC_BODY)
    with pytest.raises(WebhookVerificationError):
        verify(SPEC_SECRET, headers, b"\xff" + SPEC_BODY, now=SPEC_TIMESTAMP)


def test_the_secret_prefix_is_optional() -> None:
    bare = SPEC_SECRET.removeprefix("whsec_")
    assert sign(bare, msg_id=SPEC_MSG_ID, timestamp=SPEC_TIMESTAMP, body=SPEC_BODY) == SPEC_SIGNATURE


def test_verify_accepts_the_spec_vector_within_tolerance() -> None:
    headers = {
        "webhook-id": SPEC_MSG_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }
    verify(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TIMESTAMP + 299)


@pytest.mark.parametrize(
    ("change", "now_offset"),
    [
        ({"webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="}, 0),  # one byte off
        ({"webhook-signature": "v2," + SPEC_SIGNATURE.removeprefix("v1,")}, 0),  # unknown version
        ({"webhook-id": "msg_other"}, 0),  # the id is signed
        ({"webhook-timestamp": "hello"}, 0),
        ({}, 301),  # too old
        ({}, -301),  # from the future
    ],
)
def test_verify_refuses(change: dict[str, str], now_offset: int) -> None:
    headers = {
        "webhook-id": SPEC_MSG_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }
    with pytest.raises(WebhookVerificationError):
        verify(SPEC_SECRET, headers | change, SPEC_BODY, now=SPEC_TIMESTAMP + now_offset)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_verify_refuses_missing_headers(missing: str) -> None:
    headers = {
        "webhook-id": SPEC_MSG_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }
    del headers[missing]
    with pytest.raises(WebhookVerificationError):
        verify(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TIMESTAMP)


def test_verify_finds_the_valid_signature_among_several() -> None:
    other = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
    headers = {
        "Webhook-Id": SPEC_MSG_ID,  # header names are case-insensitive
        "Webhook-Timestamp": str(SPEC_TIMESTAMP),
        "Webhook-Signature": f"{other} {SPEC_SIGNATURE} {other}",
    }
    verify(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TIMESTAMP)


def test_round_trip_with_a_generated_secret_and_a_tampered_body() -> None:
    secret = generate_secret()
    assert secret.startswith("whsec_") and len(secret_key(secret)) == 32
    body = encode_payload(event_payload(WebhookEvent.COMPLETED, {"id": "x"}, at=datetime.now(UTC)))
    now = int(time.time())
    headers = signature_headers(secret, msg_id="msg_1", timestamp=now, body=body)
    verify(secret, headers, body, now=now)
    with pytest.raises(WebhookVerificationError):
        verify(secret, headers, body.replace(b'"x"', b'"y"'), now=now)
    with pytest.raises(WebhookVerificationError):
        verify(generate_secret(), headers, body, now=now)


def test_secret_must_be_base64() -> None:
    with pytest.raises(ValueError, match="base64"):
        secret_key("whsec_not base64!")


def test_payload_shape() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    payload = event_payload(WebhookEvent.STARTED, {"id": "job"}, at=at)
    assert payload == {
        "type": "generation.started",
        "timestamp": "2026-01-02T03:04:05+00:00",
        "data": {"id": "job"},
    }
    assert encode_payload(payload) == (
        b'{"type":"generation.started","timestamp":"2026-01-02T03:04:05+00:00","data":{"id":"job"}}'
    )


def test_message_id_is_stable_per_job_and_event() -> None:
    job = uuid.uuid4()
    assert message_id(job, WebhookEvent.COMPLETED) == message_id(job, WebhookEvent.COMPLETED)
    assert message_id(job, WebhookEvent.STARTED) != message_id(job, WebhookEvent.COMPLETED)
    assert message_id(job, WebhookEvent.COMPLETED) != message_id(uuid.uuid4(), WebhookEvent.COMPLETED)
    assert len(message_id(job, WebhookEvent.COMPLETED)) <= 64  # webhook_deliveries.message_id


def test_events_filter() -> None:
    assert wants_event(["start", "completed"], WebhookEvent.STARTED)
    assert wants_event(["completed"], WebhookEvent.COMPLETED)
    assert not wants_event(["completed"], WebhookEvent.STARTED)
    assert not wants_event([], WebhookEvent.COMPLETED)


def test_retry_schedule_ends_after_its_last_delay() -> None:
    schedule = [0.0, 5.0, 300.0]
    assert [delay_before(attempt, schedule) for attempt in range(0, 5)] == [None, 0.0, 5.0, 300.0, None]


def test_status_classes() -> None:
    assert is_delivered(200) and is_delivered(204) and not is_delivered(301) and not is_delivered(500)
    assert is_gone(410) and not is_gone(404)


# --- URL safety --------------------------------------------------------------------------------


DNS = {
    "hooks.example.com": ["93.184.216.34"],
    "internal.example.com": ["10.1.2.3"],
    "mixed.example.com": ["93.184.216.34", "192.168.1.1"],
    "metadata.example.com": ["169.254.169.254"],
    "v6.example.com": ["2606:2800:220:1:248:1893:25c8:1946"],
    "mapped.example.com": ["::ffff:127.0.0.1"],
}


def check(url: str, allow: list[str] | None = None) -> tuple[str, ...]:
    def resolve(host: str, port: int) -> list[str]:
        if host not in DNS:
            raise OSError("no such host")
        return DNS[host]

    return check_webhook_url(url, allow_hosts=allow or [], resolve=resolve).addresses


def test_public_hosts_pass_with_the_addresses_checked() -> None:
    assert check("https://hooks.example.com/reprise") == ("93.184.216.34",)
    assert check("http://v6.example.com:8080/x") == ("2606:2800:220:1:248:1893:25c8:1946",)
    assert check("https://93.184.216.34/") == ("93.184.216.34",)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://[::1]/hook",
        "http://0.0.0.0/",
        "http://internal.example.com/",
        "http://mixed.example.com/",  # one private address is enough
        "http://metadata.example.com/latest/meta-data",
        "http://169.254.169.254/",
        "http://100.64.0.1/",  # carrier-grade NAT
        "http://mapped.example.com/",
        "http://[::ffff:10.0.0.1]/",
        "ftp://hooks.example.com/",
        "file:///etc/passwd",
        "http:///no-host",
        "http://nowhere.example.com/",  # does not resolve
        "http://hooks.example.com:99999/",  # bad port
    ],
)
def test_unsafe_urls_are_refused_naming_the_field(url: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check(url)
    assert refused.value.field == "webhook"


def test_allow_list_admits_hosts_ips_and_networks() -> None:
    assert check("http://127.0.0.1:9000/", allow=["127.0.0.1"]) == ("127.0.0.1",)
    assert check("http://internal.example.com/", allow=["10.0.0.0/8"]) == ("10.1.2.3",)
    assert check("http://internal.example.com/", allow=["internal.example.com"]) == ("10.1.2.3",)
    with pytest.raises(InvalidInput):
        check("http://127.0.0.2/", allow=["127.0.0.1"])  # an IP entry is that address only
    with pytest.raises(InvalidInput):
        check("http://mixed.example.com/", allow=["10.0.0.0/8"])  # 192.168.1.1 is still private


def test_the_resolver_is_used_only_for_names() -> None:
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append(f"{host}:{port}")
        return ["93.184.216.34"]

    check_webhook_url("https://hooks.example.com/x", allow_hosts=[], resolve=resolve)
    check_webhook_url("https://93.184.216.34/x", allow_hosts=[], resolve=resolve)
    assert calls == ["hooks.example.com:443"]


def test_signature_header_is_base64_of_a_sha256() -> None:
    value = sign(generate_secret(), msg_id="m", timestamp=1, body=b"{}")
    version, _, digest = value.partition(",")
    assert version == "v1" and len(base64.b64decode(digest)) == 32


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0177.0.0.1", "0x7f.1", "0x7f000001", "127.1", "017700000001", "3232235521", "1.2.3.4."],
)
def test_non_canonical_numeric_hosts_are_refused_whatever_a_resolver_says(host: str) -> None:
    """Decimal, octal, hex and short IPv4 forms (of 127.0.0.1 and 192.168.0.1 here) never reach a
    resolver that might read them otherwise than the HTTP client: not even one answering a public address."""

    def public(name: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    with pytest.raises(InvalidInput, match="non-canonical numeric"):
        check_webhook_url(f"http://{host}/hook", allow_hosts=[], resolve=public)
    canonical = check_webhook_url("http://93.184.216.34/hook", allow_hosts=[], resolve=public)
    assert canonical.addresses == ("93.184.216.34",)
