"""The Python client (`clients/python`, `reprise_client`) against the live stack: create, wait (held
by `Prefer: wait`), image, list across pages, cancel, delete, errors; sync and async; a real webhook
delivery verified with the Standard Webhooks library, whose signed link reads the image without the key;
and a create whose answer is lost to an injected 503, retried into exactly one job."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from reprise_client import ApiError, AsyncClient, Client, verify_webhook

from db.tenants import TenantCredentials
from tests.clients.test_retry_against_the_api import CREATE, Faults, FaultyTransport, jobs_of
from tests.e2e.conftest import Stack, WebhookReceiver, make_tenant

pytestmark = pytest.mark.integration

PROMPT = "a small red circle left of a blue square"


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> TenantCredentials:
    return make_tenant(stack.settings, f"client-{uuid.uuid4().hex[:8]}")


def test_the_sync_client_runs_a_job_from_submission_to_deletion(
    stack: Stack, tenant: TenantCredentials
) -> None:
    with Client(stack.base_url, tenant.api_key) as reprise:
        first = reprise.create(PROMPT, seed=1, wait_s=60)  # held until it ended
        assert first.status == "succeeded" and first.done
        second = reprise.create(PROMPT.replace("small", "big"), seed=2)
        assert reprise.wait(second.id, timeout=120).status == "succeeded"
        assert reprise.image(first.id).startswith(b"\x89PNG")
        assert reprise.image(first.id, format="webp").startswith(b"RIFF")
        listed = [job.id for job in reprise.list(limit=1)]  # one job per page: follows `next`
        assert listed[:2] == [second.id, first.id]
        assert reprise.cancel(first.id).status == "succeeded"  # a finished job stays as it is
        reprise.delete(second.id)
        with pytest.raises(ApiError) as gone:
            reprise.get(second.id)
        assert gone.value.status == 404 and gone.value.type.endswith("not-found")
        with pytest.raises(ApiError) as invalid:
            reprise.create("", seed=1)
        assert invalid.value.status == 422


def test_the_async_client_waits_and_reads(stack: Stack, tenant: TenantCredentials) -> None:
    async def run() -> tuple[str, bytes]:
        async with AsyncClient(stack.base_url, tenant.api_key) as reprise:
            job = await reprise.create(PROMPT, seed=3)
            done = await reprise.wait(job.id, timeout=120)
            return done.status, await reprise.image(done.id, format="jpeg")

    status, image = asyncio.run(run())
    assert status == "succeeded" and image.startswith(b"\xff\xd8")


def test_a_real_delivery_verifies_with_the_standard_webhooks_library(
    stack: Stack, tenant: TenantCredentials, webhook_receiver: WebhookReceiver
) -> None:
    with Client(stack.base_url, tenant.api_key) as reprise:
        job = reprise.create(
            PROMPT, seed=4, webhook=webhook_receiver.url, webhook_events_filter=["completed"]
        )
        reprise.wait(job.id, timeout=120)
    delivery = webhook_receiver.wait_for(job.id, "generation.completed")
    event = verify_webhook(tenant.webhook_secret, delivery.headers, delivery.body)
    assert event["data"]["id"] == job.id and event["data"]["status"] == "succeeded"
    link = event["signed_output"]["url"]  # the image without the API key
    image = httpx.get(link if link.startswith("http") else stack.base_url + link, timeout=60)
    assert image.status_code == 200 and image.content.startswith(b"\x89PNG")


def test_a_create_whose_answer_is_lost_to_a_503_makes_one_job_and_it_runs(
    stack: Stack, tenant: TenantCredentials
) -> None:
    faults = Faults(script=[(CREATE, "lost")])
    http = httpx.Client(
        base_url=stack.base_url, headers=tenant.auth_headers, transport=FaultyTransport(faults), timeout=90
    )
    with Client(http=http) as reprise:
        job = reprise.create(PROMPT, seed=5)
        assert reprise.wait(job.id, timeout=120).status == "succeeded"
    (first, outcome), (again, status) = faults.seen[:2]
    assert (outcome, status) == ("lost 202", 200)  # the retry was answered with the job the first made
    assert first.headers["idempotency-key"] == again.headers["idempotency-key"]
    assert [str(row.id) for row in jobs_of(stack.settings, tenant) if row.seed == 5] == [job.id]  # one job
