"""A revoked key stops working at once on every API process, however long they cache keys: `reprise keys
revoke` announces it over Redis (jobs.key_events), each process drops it from its key cache and closes
its open event streams (api.revocations). Two apps, each on its own event loop, stand for two processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from core.settings import Settings, get_settings
from db.tenants import TenantCredentials
from reprise.cli import app as cli

pytestmark = pytest.mark.integration

CACHE_S = 60.0  # far beyond the one second a revocation may take


@pytest.fixture
def revoke(api_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """`reprise keys revoke KEY_ID` against these tests' database and Redis."""
    monkeypatch.setenv("REPRISE_DATABASE_URL", api_settings.sqlalchemy_url)
    monkeypatch.setenv("REPRISE_REDIS_URL", api_settings.broker_url)
    get_settings.cache_clear()

    def run(key_id: str) -> None:
        done = CliRunner().invoke(cli, ["keys", "revoke", key_id])
        assert done.exit_code == 0 and "revoked" in done.output, done.output

    yield run
    get_settings.cache_clear()


def _until_401(client: TestClient, headers: dict[str, str], within_s: float) -> float:
    started = time.monotonic()
    while (waited := time.monotonic() - started) < within_s:
        if client.get("/v1/generations", headers=headers).status_code == 401:
            return waited
        time.sleep(0.02)
    raise AssertionError(f"the revoked key still worked after {within_s} s")


def test_a_revoked_key_is_refused_by_every_api_process_within_a_second(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, revoke: Callable[[str], None]
) -> None:
    headers = tenant.auth_headers
    with make_client(auth_cache_s=CACHE_S) as first, make_client(auth_cache_s=CACHE_S) as second:
        for client in (first, second):  # each process trusts the key from its cache from now on
            assert client.get("/v1/generations", headers=headers).status_code == 200
        assert tenant.key_id is not None
        revoke(str(tenant.key_id))
        for client in (first, second):
            _until_401(client, headers, within_s=1.0)
            refused = client.get("/v1/generations", headers=headers)
            assert refused.headers["content-type"] == "application/problem+json"


def test_an_open_event_stream_of_the_revoked_key_closes(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, revoke: Callable[[str], None]
) -> None:
    headers = tenant.auth_headers
    with make_client(auth_cache_s=CACHE_S) as client:
        created = client.post("/v1/generations", json={"prompt": "a fox"}, headers=headers)
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        body: list[str] = []

        def follow() -> None:  # the job never runs here: only a revocation ends its stream early
            with client.stream("GET", f"/v1/generations/{job_id}/events", headers=headers) as response:
                body.extend(response.iter_lines())

        stream = threading.Thread(target=follow, daemon=True)
        stream.start()
        time.sleep(0.5)  # the stream is open and waiting for the job's next change
        assert tenant.key_id is not None
        started = time.monotonic()
        revoke(str(tenant.key_id))
        stream.join(timeout=5.0)
        assert not stream.is_alive(), "the stream of a revoked key is still open"
        assert time.monotonic() - started < 2.0
        assert "event: revoked" in body and "event: done" not in body
