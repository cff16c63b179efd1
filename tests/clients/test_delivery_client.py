"""The client's webhook deliveries: its typed model against the server's OpenAPI document, then the
dead letter listed, read and redelivered through Client against the real API app."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import cast

import httpx
import pytest
from fastapi.testclient import TestClient
from reprise_client import ApiError, Client, WebhookDelivery

from api.main import create_app
from core.settings import Settings
from core.vocabulary import WebhookEvent
from db.engine import session_scope
from db.tenants import TenantCredentials
from db.webhooks import claim_attempt, finish_attempt
from jobs.webhooks import message_id


def test_the_delivery_model_has_exactly_the_documented_properties() -> None:
    schema = create_app(Settings.model_validate({})).openapi()["components"]["schemas"]["WebhookDelivery"]
    assert {field.name for field in dataclasses.fields(WebhookDelivery)} == set(schema["properties"])


def test_a_status_the_server_does_not_know_is_refused_before_any_request() -> None:
    client = Client("http://127.0.0.1:1", "unused")
    with pytest.raises(ValueError, match="delivered, failed, pending"):
        client.delivery_page(status="lost")


def _failed_delivery(settings: Settings, job_id: str) -> str:
    """Record the completed event of a job as failed after its last attempt (HTTP 500)."""
    delivery = message_id(uuid.UUID(job_id), WebhookEvent.COMPLETED)
    with session_scope(settings) as session:
        claimed = claim_attempt(
            session,
            job_id=uuid.UUID(job_id),
            message_id=delivery,
            event=WebhookEvent.COMPLETED.value,
            url="https://hooks.example.com/reprise",
            attempt=8,
            next_attempt_at=None,
        )
        assert claimed is not None
        finish_attempt(session, delivery_id=claimed, status_code=500, error="HTTP 500", next_attempt_at=None)
    return delivery


@pytest.mark.integration
def test_the_client_lists_and_redelivers_the_dead_letter(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, api_settings: Settings
) -> None:
    app_client = make_client()
    app_client.headers.update(tenant.auth_headers)
    # Starlette's TestClient is an httpx2.Client: the same interface as the httpx.Client the client wraps
    client = Client(str(app_client.base_url), "unused", http=cast(httpx.Client, app_client))
    jobs = [client.create("a heron at dawn", webhook="http://127.0.0.1:9/hooks").id for _ in range(3)]
    since = datetime.now(UTC) - timedelta(seconds=1)
    ids = [_failed_delivery(api_settings, job) for job in jobs]

    failed = list(client.deliveries(status="failed", limit=2))  # two pages
    assert [d.id for d in failed] == list(reversed(ids))
    assert {(d.status, d.attempts, d.last_status_code, d.last_error) for d in failed} == {
        ("failed", 8, 500, "HTTP 500")
    }
    assert client.delivery(ids[0]).generation_id == jobs[0]
    assert client.redeliver(ids[0]).ids == [ids[0]]
    assert client.redeliver_range(since).ids == ids
    with pytest.raises(ApiError) as raised:
        client.delivery(f"msg_{uuid.uuid4().hex}_completed")
    assert raised.value.status == 404
