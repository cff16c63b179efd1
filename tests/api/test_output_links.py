"""Signed output links: the rules (jobs.output_links), then a completed event's `signed_output` as the
delivery worker builds it, downloaded from the real API without the API key; a forged or altered link,
one signed with the tenant's webhook secret and one beyond the cap on a link's life are a 403, an
expired one a 410."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from core.server_keys import output_link_key
from core.settings import Settings
from core.vocabulary import WebhookEvent
from db.blobs.local import LocalBlobStore
from db.tenants import TenantCredentials
from jobs.output_links import LinkCheck, check_link, link_signature, signed_output
from jobs.webhooks import secret_key
from workers.webhook_delivery import _Message, _prepare

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
JOB = uuid.UUID("0f6a0f6a-0000-4000-8000-000000000001")
PNG = b"\x89PNG\r\n\x1a\nfake"


def link_query(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    return parts.path, int(query["expires"][0]), query["signature"][0]


KEY, OTHER_KEY = b"k" * 32, b"o" * 32
DAY_S = 24 * 3600.0


def test_a_link_is_valid_until_it_expires_and_only_for_its_job_and_key() -> None:
    made = signed_output(job_id=JOB, key=KEY, base_url="https://r.example", ttl_s=3600, now=NOW)
    path, expires, signature = link_query(made["url"])
    assert path == f"/v1/outputs/{JOB}" and made["url"].startswith("https://r.example/")
    assert made["expires_at"] == (NOW + timedelta(hours=1)).isoformat()

    def check(
        *,
        key: bytes = KEY,
        job: uuid.UUID = JOB,
        at: datetime = NOW,
        until: int = expires,
        cap: float = DAY_S,
    ) -> LinkCheck:
        return check_link(key=key, job_id=job, expires=until, signature=signature, now=at, max_ttl_s=cap)

    assert check() is LinkCheck.VALID
    assert check(at=NOW + timedelta(hours=1)) is LinkCheck.EXPIRED
    assert check(key=OTHER_KEY) is LinkCheck.INVALID
    assert check(job=uuid.uuid4()) is LinkCheck.INVALID
    assert check(until=expires + 3600) is LinkCheck.INVALID  # a lengthened expiry breaks the signature
    assert check(until=expires + 3600, at=NOW + timedelta(days=1)) is LinkCheck.INVALID  # not "expired"
    assert check(cap=1800) is LinkCheck.BEYOND_CAP  # an hour's link, where links may live half an hour
    assert check(cap=1800, at=NOW + timedelta(minutes=31)) is LinkCheck.VALID  # within the cap from now


def test_a_link_beyond_the_cap_is_refused_even_when_signed() -> None:
    made = signed_output(job_id=JOB, key=KEY, base_url="", ttl_s=10 * 365 * DAY_S, now=NOW)
    _, expires, signature = link_query(made["url"])
    checked = check_link(key=KEY, job_id=JOB, expires=expires, signature=signature, now=NOW, max_ttl_s=DAY_S)
    assert checked is LinkCheck.BEYOND_CAP


def test_the_signature_is_domain_separated_and_url_safe() -> None:
    signature = link_signature(KEY, JOB, 1_700_000_000)
    assert len(signature) == 43 and set(signature) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    )


@pytest.fixture
def succeeded_job(
    client: TestClient,
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    blob_store: LocalBlobStore,
) -> str:
    """A job with a webhook, succeeded with a stored PNG."""
    created = client.post(
        "/v1/generations",
        json={"prompt": "a fox", "webhook": "http://127.0.0.1:9/hook"},
        headers=tenant.auth_headers,
    )
    job_id: str = created.json()["id"]
    blob_store.put(f"jobs/{job_id}/image.png", PNG)
    set_job(job_id, status="succeeded", image_keys={"png": f"jobs/{job_id}/image.png"}, finished_at=NOW)
    return job_id


def delivered_link(settings: Settings, job_id: str, **overrides: object) -> str:
    message = _prepare(settings.model_copy(update=overrides), uuid.UUID(job_id), WebhookEvent.COMPLETED, 1)
    assert isinstance(message, _Message)
    event = json.loads(message.body)
    assert event["data"]["id"] == job_id and event["data"]["status"] == "succeeded"
    assert "signed_output" not in event["data"]  # data stays the job object of GET
    url: str = event["signed_output"]["url"]
    return url


@pytest.mark.integration
def test_a_completed_events_link_downloads_the_image_without_the_key(
    client: TestClient, api_settings: Settings, succeeded_job: str
) -> None:
    url = delivered_link(api_settings, succeeded_job, public_base_url="http://testserver")
    assert "authorization" not in {name.lower() for name in client.headers}
    response = client.get(url)
    assert response.status_code == 200 and response.content == PNG
    assert response.headers["content-type"] == "image/png"


@pytest.mark.integration
def test_an_altered_link_is_403_and_an_expired_one_410(
    client: TestClient, api_settings: Settings, succeeded_job: str
) -> None:
    path, expires, signature = link_query(delivered_link(api_settings, succeeded_job))
    forged = client.get(path, params={"expires": expires + 60, "signature": signature})
    assert forged.status_code == 403 and forged.json()["type"] == "urn:reprise:problem:invalid-link"
    other = client.get(f"/v1/outputs/{uuid.uuid4()}", params={"expires": expires, "signature": signature})
    assert other.status_code == 403
    old = link_query(delivered_link(api_settings, succeeded_job, output_link_ttl_s=0.001))
    expired = client.get(old[0], params={"expires": old[1], "signature": old[2]})
    assert expired.status_code == 410 and expired.json()["type"] == "urn:reprise:problem:link-expired"
    assert expired.headers["content-type"] == "application/problem+json"
    assert client.get(path, params={"expires": expires}).status_code == 422  # no signature at all


@pytest.mark.integration
def test_a_started_event_carries_no_link(
    client: TestClient, api_settings: Settings, tenant: TenantCredentials
) -> None:
    created = client.post(
        "/v1/generations",
        json={"prompt": "a fox", "webhook": "http://127.0.0.1:9/hook", "webhook_events_filter": ["start"]},
        headers=tenant.auth_headers,
    )
    message = _prepare(api_settings, uuid.UUID(created.json()["id"]), WebhookEvent.STARTED, 1)
    assert isinstance(message, _Message) and "signed_output" not in json.loads(message.body)


@pytest.mark.integration
def test_a_link_signed_with_the_tenants_webhook_secret_is_refused(
    client: TestClient, api_settings: Settings, succeeded_job: str, tenant: TenantCredentials
) -> None:
    """Every receiver of a tenant's webhooks holds its secret: a link made with it opens nothing."""
    path, expires, _ = link_query(delivered_link(api_settings, succeeded_job))
    from_secret = link_signature(secret_key(tenant.webhook_secret), uuid.UUID(succeeded_job), expires)
    refused = client.get(path, params={"expires": expires, "signature": from_secret})
    assert refused.status_code == 403 and refused.headers["content-type"] == "application/problem+json"


@pytest.mark.integration
def test_a_server_signed_link_beyond_the_cap_is_refused_with_a_problem(
    client: TestClient, api_settings: Settings, succeeded_job: str
) -> None:
    """A link minted with the server's key but living past REPRISE_OUTPUT_LINK_MAX_TTL_S (as one made
    before an operator lowered the cap): 403, problem+json, naming the cap."""
    job = uuid.UUID(succeeded_job)
    expires = int(datetime.now(UTC).timestamp() + api_settings.output_link_max_ttl_s + 3600)
    signature = link_signature(output_link_key(api_settings), job, expires)
    refused = client.get(f"/v1/outputs/{job}", params={"expires": expires, "signature": signature})
    assert refused.status_code == 403 and refused.headers["content-type"] == "application/problem+json"
    assert "REPRISE_OUTPUT_LINK_MAX_TTL_S" in refused.json()["detail"]
    within = int(datetime.now(UTC).timestamp() + 600)
    signature = link_signature(output_link_key(api_settings), job, within)
    assert (
        client.get(f"/v1/outputs/{job}", params={"expires": within, "signature": signature}).status_code
        == 200
    )
