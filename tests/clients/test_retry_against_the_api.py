"""The client's retries against the real API (uvicorn on a local port, the real Postgres and Redis),
with faults injected between them: a create's answer lost and replaced by 503 + Retry-After after the
API made the job, a 503 before it did, a refused connection. Each create makes exactly one job."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from reprise_client import AsyncClient, Client, RetryPolicy, ServiceUnavailable
from sqlalchemy import func, select

from core.settings import Settings
from db.engine import session_scope
from db.models import Job
from db.tenants import TenantCredentials

pytestmark = pytest.mark.integration

CREATE = ("POST", "/v1/generations")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def api_url(make_client: Callable[..., TestClient]) -> Iterator[str]:
    """The API app of tests/support/fixtures served over HTTP by uvicorn, in a thread."""
    app = make_client().app
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@dataclass
class Faults:
    """Between the client and the API: each scripted fault is used once, by the first request that
    matches its (method, path); everything else passes through. "lost" forwards the request and answers
    503 + Retry-After instead of the API's answer; "busy" answers that without forwarding; "refused"
    raises a connection error without forwarding."""

    script: list[tuple[tuple[str, str], str]]
    retry_after: str = "1"
    seen: list[tuple[httpx.Request, int | str]] = field(default_factory=list)  # (request, status or fault)

    def take(self, request: httpx.Request) -> str | None:
        """The fault for this request, if one is scripted (used up)."""
        for index, (route, fault) in enumerate(self.script):
            if route == (request.method, request.url.path):
                del self.script[index]
                return fault
        return None

    @staticmethod
    def forwards(fault: str | None) -> bool:
        return fault in (None, "lost")

    def answer(
        self, request: httpx.Request, fault: str | None, upstream: httpx.Response | None
    ) -> httpx.Response:
        """What the client gets: the API's answer, or the fault in its place."""
        if upstream is not None and fault is None:
            self.seen.append((request, upstream.status_code))
            return upstream
        outcome = f"lost {upstream.status_code}" if upstream is not None else str(fault)
        self.seen.append((request, outcome))
        if fault == "refused":
            raise httpx.ConnectError("injected: refused", request=request)
        body = {"type": "urn:reprise:problem:overloaded", "status": 503, "detail": f"injected: {outcome}"}
        return httpx.Response(503, json=body, headers={"Retry-After": self.retry_after}, request=request)


class FaultyTransport(httpx.HTTPTransport):
    def __init__(self, faults: Faults) -> None:
        super().__init__()
        self.faults = faults

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        fault = self.faults.take(request)
        upstream = None
        if self.faults.forwards(fault):
            upstream = super().handle_request(request)
            upstream.read()
        return self.faults.answer(request, fault, upstream)


class AsyncFaultyTransport(httpx.AsyncHTTPTransport):
    def __init__(self, faults: Faults) -> None:
        super().__init__()
        self.faults = faults

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        fault = self.faults.take(request)
        upstream = None
        if self.faults.forwards(fault):
            upstream = await super().handle_async_request(request)
            await upstream.aread()
        return self.faults.answer(request, fault, upstream)


def client_through(api_url: str, tenant: TenantCredentials, faults: Faults, **kwargs: object) -> Client:
    http = httpx.Client(
        base_url=api_url, headers=tenant.auth_headers, transport=FaultyTransport(faults), timeout=30
    )
    return Client(http=http, **kwargs)  # type: ignore[arg-type]


def jobs_of(settings: Settings, tenant: TenantCredentials) -> list[Job]:
    with session_scope(settings) as session:
        return list(session.scalars(select(Job).where(Job.tenant_id == tenant.tenant_id)))


def count_jobs(settings: Settings, tenant: TenantCredentials) -> int:
    with session_scope(settings) as session:
        query = select(func.count()).select_from(Job).where(Job.tenant_id == tenant.tenant_id)
        return session.scalar(query) or 0


def test_a_create_whose_answer_was_lost_is_retried_and_makes_one_job(
    api_url: str, api_settings: Settings, tenant: TenantCredentials
) -> None:
    faults = Faults(script=[(CREATE, "lost")])
    with client_through(api_url, tenant, faults) as reprise:
        started = time.monotonic()
        job = reprise.create("a lighthouse at dusk", seed=5)
        assert time.monotonic() - started >= 1.0  # Retry-After: 1 was honoured
        assert reprise.get(job.id).id == job.id
    (first, outcome), (again, status) = faults.seen[:2]
    assert outcome == "lost 202" and status == 200  # the API made the job, then answered the retry's replay
    assert first.headers["idempotency-key"] == again.headers["idempotency-key"]
    assert [str(row.id) for row in jobs_of(api_settings, tenant)] == [job.id]  # exactly one job


def test_a_create_refused_before_the_api_saw_it_makes_one_job(
    api_url: str, api_settings: Settings, tenant: TenantCredentials
) -> None:
    faults = Faults(script=[(CREATE, "refused"), (CREATE, "busy")], retry_after="0")
    with client_through(api_url, tenant, faults, retry=RetryPolicy(backoff_s=0.1)) as reprise:
        job = reprise.create("a lighthouse at dusk", seed=6)
    assert [outcome for _, outcome in faults.seen] == ["refused", "busy", 202]
    assert [str(row.id) for row in jobs_of(api_settings, tenant)] == [job.id]


def test_the_async_client_makes_one_job_through_a_lost_answer(
    api_url: str, api_settings: Settings, tenant: TenantCredentials
) -> None:
    faults = Faults(script=[(CREATE, "lost")], retry_after="0")

    async def run() -> str:
        http = httpx.AsyncClient(
            base_url=api_url, headers=tenant.auth_headers, transport=AsyncFaultyTransport(faults), timeout=30
        )
        async with AsyncClient(http=http) as reprise:
            return (await reprise.create("a lighthouse at dusk", seed=7)).id

    job_id = asyncio.run(run())
    assert [outcome for _, outcome in faults.seen] == ["lost 202", 200]
    assert [str(row.id) for row in jobs_of(api_settings, tenant)] == [job_id]


def test_without_retries_the_503_is_the_callers_and_the_job_may_exist(
    api_url: str, api_settings: Settings, tenant: TenantCredentials
) -> None:
    faults = Faults(script=[(CREATE, "lost")], retry_after="3")
    with client_through(api_url, tenant, faults, retry=RetryPolicy(attempts=1)) as reprise:
        with pytest.raises(ServiceUnavailable) as raised:
            reprise.create("a lighthouse at dusk", seed=8, idempotency_key="order-8")
        assert raised.value.retry_after == 3.0
        assert count_jobs(api_settings, tenant) == 1  # the API made it; the caller's retry finds it
        assert reprise.create("a lighthouse at dusk", seed=8, idempotency_key="order-8").status == "starting"
    assert count_jobs(api_settings, tenant) == 1
