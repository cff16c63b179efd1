"""Fixtures shared by the API and worker tests (tests/conftest.py registers them): the API against the
real Postgres and Redis, an app per test, tenants with real API keys.

Enqueued tasks go to this run's own Redis database, where they sit (no worker consumes them), so
tests read the queues with LLEN instead of mocking Celery.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.main import create_app
from api.reads import ImageReader
from core.settings import Settings, get_settings
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.models import Job
from db.tenants import TenantCredentials, issue_key
from jobs.celery_app import make_celery_app
from jobs.dispatch import CeleryDispatcher
from jobs.queues import Queue, step_lists


@pytest.fixture
def api_settings(db_settings: Settings, redis_url: str) -> Settings:
    return db_settings.model_copy(
        update={
            "redis_url": redis_url,
            "webhook_allow_hosts": ["127.0.0.1"],
            "max_body_bytes": 4096,
            "auth_cache_s": 0.0,  # revocations take effect at once; tests/api/test_tenant_safety.py caches
        }
    )


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    """This run's Redis database, its queues emptied before and after each test."""
    client = redis.Redis.from_url(redis_url)
    # every priority step's list too (kombu's Redis transport: <queue>\x06\x16<step>, jobs.priority)
    lists = [name for queue in Queue for name in step_lists(queue.value)]
    client.delete(*lists)
    yield client
    client.delete(*lists)
    client.close()


@pytest.fixture
def blob_store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


@pytest.fixture
def make_client(
    api_settings: Settings, broker: redis.Redis, blob_store: LocalBlobStore
) -> Iterator[Callable[..., TestClient]]:
    """Build a client for an app with these settings overridden (the broker is always real)."""
    clients: list[TestClient] = []

    def build(*, reader: ImageReader | None = None, **overrides: Any) -> TestClient:
        settings = api_settings.model_copy(update=overrides)
        dispatcher = CeleryDispatcher(make_celery_app(settings))
        app = create_app(settings, dispatcher=dispatcher, blob_store=blob_store, reader=reader)
        client = TestClient(app, raise_server_exceptions=False)
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture
def make_tenant(api_settings: Settings) -> Callable[..., TenantCredentials]:
    def build(
        *, shared_cache: bool = False, inflight_limit: int | None = None, admin: bool = False
    ) -> TenantCredentials:
        with session_scope(api_settings) as session:
            return issue_key(
                session=session,
                name=f"tenant-{uuid.uuid4().hex[:10]}",
                shared_cache=shared_cache,
                inflight_limit=inflight_limit,
                admin=admin,
            )

    return build


@pytest.fixture
def tenant(make_tenant: Callable[..., TenantCredentials]) -> TenantCredentials:
    return make_tenant()


@pytest.fixture
def admin(make_tenant: Callable[..., TenantCredentials]) -> TenantCredentials:
    """A tenant whose key may read service-wide figures (`reprise keys create --admin`)."""
    return make_tenant(admin=True)


@pytest.fixture
def set_job(api_settings: Settings) -> Callable[..., None]:
    """Change a job's columns as a worker would."""

    def apply(job_id: str, **values: Any) -> None:
        with session_scope(api_settings) as session:
            session.execute(update(Job).where(Job.id == uuid.UUID(job_id)).values(**values))

    return apply


@pytest.fixture
def fresh_settings() -> Iterator[None]:
    """For tests of commands that read settings through get_settings (cached per process): the test's
    environment is read afresh, and the next test's too."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()
