"""Operations: /healthz, /readyz, /metrics, /v1/stats, the OpenAPI document, and the import rule."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import delete

from core.settings import Settings
from db.engine import session_scope
from db.models import IntervalStats, WorkerRoleRow
from db.tenants import TenantCredentials
from jobs.queues import Queue

pytestmark = pytest.mark.integration


def test_healthz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_when_everything_answers(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200 and response.json() == {"status": "ready"}


@pytest.mark.parametrize(
    ("overrides", "down"),
    [
        ({"redis_url": "redis://127.0.0.1:1/0"}, "broker"),
        ({"database_url": "postgresql+psycopg://nobody@127.0.0.1:1/none"}, "database"),
    ],
)
def test_readyz_names_what_is_down(
    make_client: Callable[..., TestClient], overrides: dict[str, str], down: str
) -> None:
    response = make_client(**overrides).get("/readyz")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == f"unreachable: {down}"


def test_a_database_outage_is_a_503_problem(
    make_client: Callable[..., TestClient], tenant: TenantCredentials
) -> None:
    client = make_client(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none")
    response = client.get("/v1/generations", headers=tenant.auth_headers)
    assert response.status_code == 503
    assert response.json()["type"] == "urn:reprise:problem:database-unavailable"
    assert response.headers["Retry-After"] == "5"  # REPRISE_RETRY_AFTER_S's default


def test_metrics_count_requests_by_route_template(client: TestClient, tenant: TenantCredentials) -> None:
    def count(route: str, status: str) -> float:
        sample = f'reprise_http_requests_total{{method="GET",route="{route}",status="{status}"}} '
        lines = [line for line in client.get("/metrics").text.splitlines() if line.startswith(sample)]
        return float(lines[0].split()[-1]) if lines else 0.0

    before = count("/v1/generations/{job_id}", "404"), count("<unmatched>", "404")
    client.get("/v1/generations/00000000-0000-0000-0000-000000000000", headers=tenant.auth_headers)
    client.get("/no/such/path")
    assert (count("/v1/generations/{job_id}", "404"), count("<unmatched>", "404")) == (
        before[0] + 1,
        before[1] + 1,
    )
    text = client.get("/metrics").text
    assert "reprise_jobs_created_total" in text and "reprise_http_request_duration_seconds_bucket" in text


FAR_FUTURE = datetime(2999, 1, 1, tzinfo=UTC)  # an interval that sorts first among the session's


@pytest.fixture
def worker_names(api_settings: Settings) -> Iterator[list[str]]:
    """Names for worker rows the test adds; those rows and the FAR_FUTURE interval are removed after
    (the tables are shared by the whole test session)."""
    names = [f"gpu-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    yield names
    with session_scope(api_settings) as session:
        session.execute(delete(WorkerRoleRow).where(WorkerRoleRow.worker_name.in_(names)))
        session.execute(delete(IntervalStats).where(IntervalStats.period_start == FAR_FUTURE))


def test_stats_report_hits_k_compute_saved_queues_and_pools(
    client: TestClient,
    tenant: TenantCredentials,
    admin: TenantCredentials,
    set_job: Callable[..., None],
    api_settings: Settings,
    broker: redis.Redis,
    worker_names: list[str],
) -> None:
    # An admin's /v1/stats covers every tenant, and other tests leave jobs behind: compare before and after.
    def read() -> dict[str, Any]:
        stats: dict[str, Any] = client.get("/v1/stats?window_s=600", headers=admin.auth_headers).json()
        return stats

    before = read()
    ids = [
        client.post("/v1/generations", json={"prompt": "p"}, headers=tenant.auth_headers).json()["id"]
        for _ in range(4)
    ]
    set_job(ids[0], status="succeeded", route="hit", k=20, steps=50, denoiser_evals={"small": 30})
    set_job(ids[1], status="succeeded", route="hit", k=10, steps=50, denoiser_evals={"small": 40})
    set_job(ids[2], status="succeeded", route="miss", steps=50, denoiser_evals={"large": 50})
    with session_scope(api_settings) as session:
        roles = ["large", "small", "small"]
        session.add_all(
            [WorkerRoleRow(worker_name=n, role=r) for n, r in zip(worker_names, roles, strict=True)]
        )
        session.merge(
            IntervalStats(
                period_start=FAR_FUTURE, period_seconds=60, arrivals=4, hits=2, misses=1, predicted_misses=0
            )
        )
    after = read()

    def grew(section: str, key: str) -> int:
        return int(after[section].get(key) or 0) - int(before[section].get(key) or 0)

    assert (grew("jobs", "succeeded"), grew("jobs", "starting")) == (3, 1)
    assert (grew("cache", "hits"), grew("cache", "misses")) == (2, 1)
    assert after["cache"]["hit_rate"] == round(
        after["cache"]["hits"] / (after["cache"]["hits"] + after["cache"]["misses"]), 4
    )
    assert {
        k: after["cache"]["k_histogram"].get(k, 0) - before["cache"]["k_histogram"].get(k, 0)
        for k in ("10", "20")
    } == {"10": 1, "20": 1}
    assert (grew("compute", "steps_requested"), grew("compute", "steps_skipped")) == (150, 30)
    evals = {
        m: after["compute"]["denoiser_evaluations"].get(m, 0)
        - before["compute"]["denoiser_evaluations"].get(m, 0)
        for m in ("large", "small")
    }
    assert evals == {"large": 50, "small": 70}
    assert after["queues"][Queue.ADMIT.value] == 4 and after["queues"][Queue.CACHE_MISS.value] == 0
    assert (grew("pools", "large"), grew("pools", "small")) == (1, 2)
    assert (
        after["intervals"][0]["period_start"].startswith("2999-01-01")
        and after["intervals"][0]["arrivals"] == 4
    )


def test_every_route_is_documented(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    operations = [op for path in spec["paths"].values() for op in path.values()]
    assert len(operations) == 17  # /metrics stays out of the document
    assert {op["operationId"] for op in operations} == {
        "create_generation",
        "list_generations",
        "get_generation",
        "cancel_generation",
        "delete_generation",
        "stream_generation_events",
        "get_generation_image",
        "get_generation_video",
        "get_signed_output",
        "get_stats",
        "healthz",
        "readyz",
        "create_image",
        "list_webhook_deliveries",
        "get_webhook_delivery",
        "redeliver_webhook_delivery",
        "redeliver_webhook_deliveries",
    }
    openai = spec["paths"]["/v1/images/generations"]["post"]["responses"]
    assert "422" not in openai and "application/json" in openai["400"]["content"]  # OpenAI's error shape
    assert "security" not in spec["paths"]["/v1/outputs/{job_id}"]["get"]  # the signed link is the key
    assert all(op.get("description") for op in operations)  # the routes' docstrings
    create = spec["paths"]["/v1/generations"]["post"]
    assert {"202", "200", "400", "401", "413", "422", "429", "503"} <= create["responses"].keys()
    assert create["security"] == [{"ApiKey": []}]
    assert spec["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    assert client.get("/docs").status_code == 200


def test_the_api_never_imports_the_model_stack() -> None:
    code = (
        "import sys, api.main\n"
        "api.main.app  # the serving app, decode pool client included\n"
        "heavy = sorted(m for m in ('torch', 'diffusers', 'open_clip', 'transformers') if m in sys.modules)\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_stats_and_job_metrics_carry_the_judges_quality(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    """Where the lab's models ran, each job holds the judge's score; a tenant's /v1/stats averages them
    per route (the tenant is new: its window holds only these jobs)."""
    ids = [
        client.post("/v1/generations", json={"prompt": "p"}, headers=tenant.auth_headers).json()["id"]
        for _ in range(4)
    ]
    set_job(ids[0], status="succeeded", route="hit", k=20, steps=50, quality=0.5)
    set_job(ids[1], status="succeeded", route="hit", k=10, steps=50, quality=1.0)
    set_job(ids[2], status="succeeded", route="miss", steps=50, quality=0.875)
    set_job(ids[3], status="succeeded", route="miss", steps=50)  # not judged (not a lab prompt)
    stats = client.get("/v1/stats?window_s=600", headers=tenant.auth_headers).json()
    assert stats["quality"] == {"judged": 3, "hit_mean": 0.75, "miss_mean": 0.875}
    job = client.get(f"/v1/generations/{ids[2]}", headers=tenant.auth_headers).json()
    assert job["metrics"]["quality"] == 0.875
    assert (
        client.get(f"/v1/generations/{ids[3]}", headers=tenant.auth_headers).json()["metrics"]["quality"]
        is None
    )
