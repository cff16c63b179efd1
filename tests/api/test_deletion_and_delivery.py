"""DELETE /v1/generations/{id}, the retention pass, and presigned delivery: what is removed (the job's
blobs, the cache entries made from it, the decode nodes' copies), for whom, and what reads answer after.
Against the real database, Redis, a local blob store, and moto's S3 server for presigned URLs."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select

from core.settings import Settings
from db import cache
from db.blobs import keys
from db.blobs.local import LocalBlobStore
from db.blobs.s3 import S3BlobStore
from db.engine import session_scope
from db.models import CacheEntry, Job
from db.tenants import TenantCredentials
from jobs.passes.retention import purge_due_outputs
from jobs.queues import TaskName
from jobs.read_routing import heartbeat
from tests.support.dispatch import RecordingDispatcher

pytestmark = pytest.mark.integration


def finished_job(
    client: TestClient, who: TenantCredentials, settings: Settings, blobs: LocalBlobStore
) -> uuid.UUID:
    """A succeeded job with a stored latent and PNG, and the cache entry made from it."""
    job_id = uuid.UUID(
        client.post("/v1/generations", json={"prompt": "a fox"}, headers=who.auth_headers).json()["id"]
    )
    entry_id = uuid.uuid4()
    blobs.put(keys.job_prefix(job_id) + "final.latent", b"latent")
    blobs.put(keys.image_key(job_id, "png"), b"png")
    blobs.put(keys.final_latent_key(entry_id), b"entry")
    blobs.put(keys.state_key(entry_id, 2), b"state")
    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        job.status, job.finished_at = "succeeded", datetime.now(UTC)
        job.final_latent_key = keys.job_prefix(job_id) + "final.latent"
        job.image_keys = {"png": keys.image_key(job_id, "png")}
        cache.insert_entry(
            session,
            entry_id=entry_id,
            scope=f"tenant:{job.tenant_id}",
            model_family="tiny-sd",
            prompt="a fox",
            text_embedding=np.ones(settings.text_embedding_dim),
            image_embedding=None,
            final_latent_key=keys.final_latent_key(entry_id),
            final_bytes=5,
            steps=10,
            states=[cache.NewState(2, keys.state_key(entry_id, 2), 5)],
            source_job_id=job_id,
        )
    return job_id


def stored(blobs: LocalBlobStore, job_id: uuid.UUID, settings: Settings) -> tuple[list[str], int]:
    with session_scope(settings) as session:
        entries = session.scalars(select(CacheEntry.id).where(CacheEntry.source_job_id == job_id)).all()
    return list(blobs.list(keys.job_prefix(job_id))), len(entries)


def test_delete_removes_the_outputs_for_its_tenant_only_and_is_idempotent(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    make_tenant: Callable[..., TenantCredentials],
    api_settings: Settings,
    blob_store: LocalBlobStore,
    broker: redis.Redis,
) -> None:
    dispatcher = RecordingDispatcher()
    client = make_client()
    client.app.state.reprise.dispatcher_ = dispatcher  # type: ignore[attr-defined]
    heartbeat(broker, "decode-x", {}, ttl_s=2.0)  # one live decode node, told to forget
    job_id = finished_job(client, tenant, api_settings, blob_store)
    url = f"/v1/generations/{job_id}"
    assert client.delete(url, headers=make_tenant().auth_headers).status_code == 404
    assert stored(blob_store, job_id, api_settings) == (
        [f"jobs/{job_id}/final.latent", f"jobs/{job_id}/image.png"],
        1,
    )
    assert client.delete(url, headers=tenant.auth_headers).status_code == 204
    assert stored(blob_store, job_id, api_settings) == ([], 0)
    assert list(blob_store.list("entries/")) == []
    assert [sent.queue for sent in dispatcher.of(TaskName.FORGET_IMAGES)] == ["decode.decode-x"]
    assert client.delete(url, headers=tenant.auth_headers).status_code == 204  # again: the same answer
    assert client.get(url, headers=tenant.auth_headers).status_code == 404
    assert client.get(f"{url}/image", headers=tenant.auth_headers).status_code == 404
    listed = client.get("/v1/generations", headers=tenant.auth_headers).json()["results"]
    assert str(job_id) not in [job["id"] for job in listed]


def test_deleting_a_queued_job_cancels_it_and_the_pass_purges_what_a_late_run_stored(
    client: TestClient, tenant: TenantCredentials, api_settings: Settings, blob_store: LocalBlobStore
) -> None:
    job_id = uuid.UUID(
        client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()["id"]
    )
    assert client.delete(f"/v1/generations/{job_id}", headers=tenant.auth_headers).status_code == 204
    with session_scope(api_settings) as session:
        job = session.get_one(Job, job_id)
        assert job.status == "canceled" and job.deleted_at is not None
        job.outputs_purged_at = None  # as if a run stored its latent after the DELETE
        job.final_latent_key = keys.job_prefix(job_id) + "final.latent"
    blob_store.put(keys.job_prefix(job_id) + "final.latent", b"late")
    assert purge_due_outputs(api_settings, blob_store, RecordingDispatcher()) >= 1
    assert list(blob_store.list(keys.job_prefix(job_id))) == []


def test_retention_expires_old_outputs_and_their_reads_answer_410(
    client: TestClient, tenant: TenantCredentials, api_settings: Settings, blob_store: LocalBlobStore
) -> None:
    old = finished_job(client, tenant, api_settings, blob_store)
    new = finished_job(client, tenant, api_settings, blob_store)
    with session_scope(api_settings) as session:
        session.get_one(Job, old).finished_at = datetime.now(UTC) - timedelta(days=8)
    settings = api_settings.model_copy(update={"retention_days": 7.0})
    purge_due_outputs(settings, blob_store, RecordingDispatcher())
    assert stored(blob_store, old, settings) == ([], 0)
    assert stored(blob_store, new, settings)[1] == 1
    response = client.get(f"/v1/generations/{old}/image", headers=tenant.auth_headers)
    assert response.status_code == 410 and response.json()["type"] == "urn:reprise:problem:image-gone"
    assert (
        client.get(f"/v1/generations/{old}", headers=tenant.auth_headers).status_code == 200
    )  # the job stays


def test_a_stored_image_on_s3_is_delivered_by_a_presigned_url(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    s3_server: str,
) -> None:
    s3 = S3BlobStore(
        bucket=f"b{uuid.uuid4().hex[:12]}", endpoint_url=s3_server, access_key_id="k", secret_access_key="s"
    )
    s3.ensure_bucket()
    client = make_client(image_delivery="redirect")
    client.app.state.reprise.blob_store_ = s3  # type: ignore[attr-defined]
    job_id = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()[
        "id"
    ]
    s3.put(keys.image_key(job_id, "png"), b"\x89PNG-bytes")
    set_job(job_id, status="succeeded", image_keys={"png": keys.image_key(job_id, "png")})
    response = client.get(
        f"/v1/generations/{job_id}/image", headers=tenant.auth_headers, follow_redirects=False
    )
    assert response.status_code == 307
    fetched = httpx.get(response.headers["location"], timeout=10)
    assert fetched.status_code == 200 and fetched.content == b"\x89PNG-bytes"
