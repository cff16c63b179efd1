"""The pool monitor's latest decision and the pool sizes, in /v1/stats and in Prometheus /metrics."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete

from core.settings import Settings
from db.engine import session_scope
from db.models import PoolDecision, WorkerRoleRow
from db.tenants import TenantCredentials
from jobs.policies.k_selection import configured_table, embedder_tag

pytestmark = pytest.mark.integration


@pytest.fixture
def decision(api_settings: Settings) -> Iterator[PoolDecision]:
    """A decision newer than any other, two workers it placed; removed after."""
    names = [f"gpu-{uuid.uuid4().hex[:8]}@host" for _ in range(2)]
    row = PoolDecision(
        decided_at=datetime(2999, 1, 1, tzinfo=UTC),
        mode="throughput",
        period_start=datetime(2998, 12, 31, 23, 59, tzinfo=UTC),
        period_seconds=60,
        inputs={"request_rate": 0.5, "hit_rate": 0.8, "k_rates": {"25": 1.0}, "bounds": [2, 1, 2]},
        heuristic_large=0.71,
        controlled_large=1.16,
        pid_integral=-1.29,
        pid_error=-1.29,
        large_before=2,
        small_before=0,
        target_large=1,
        target_small=1,
        applied_large=1,
        applied_small=1,
        switches=[{"worker": names[0], "from": "large", "to": "small", "ok": True}],
    )
    with session_scope(api_settings) as session:
        session.add(row)
        session.add_all(
            [
                WorkerRoleRow(worker_name=names[0], role="small"),
                WorkerRoleRow(worker_name=names[1], role="large"),
            ]
        )
    yield row
    with session_scope(api_settings) as session:
        session.execute(delete(PoolDecision).where(PoolDecision.id == row.id))
        session.execute(delete(WorkerRoleRow).where(WorkerRoleRow.worker_name.in_(names)))


def test_stats_show_the_latest_pool_decision(
    client: TestClient, admin: TenantCredentials, decision: PoolDecision
) -> None:
    body = client.get("/v1/stats", headers=admin.auth_headers).json()
    monitor = body["pool_monitor"]
    assert monitor["mode"] == "throughput" and monitor["decided_at"].startswith("2999-01-01")
    assert (monitor["request_rate"], monitor["hit_rate"], monitor["heuristic_large"]) == (0.5, 0.8, 0.71)
    assert monitor["before"] == {"large": 2, "small": 0}
    assert monitor["target"] == monitor["applied"] == {"large": 1, "small": 1}
    assert monitor["switches"] == decision.switches
    assert body["pools"]["small"] >= 1 and body["pools"]["large"] >= 1
    # the configuration a replay records next to the pools (bench.live.stack)
    settings = client.app.state.reprise.settings  # type: ignore[attr-defined]
    assert body["monitor"] == {
        "enabled": True,
        "mode": "throughput",
        "period_s": 60,
        "cohost": settings.cohosting,
    }
    assert body["lookup"] == {
        "lookup": settings.lookup_mode.value,
        "hit_policy": settings.hit_policy.value,
        "k_table": configured_table(settings).name,
        "embedder": embedder_tag(settings.text_embedder, settings.open_clip_model, settings.lookup_mode),
    }


def test_metrics_expose_pool_sizes_and_the_decision(client: TestClient, decision: PoolDecision) -> None:
    lines = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in client.get("/metrics").text.splitlines()
        if line.startswith("reprise_pool")
    }
    assert lines['reprise_pool_target_workers{role="large"}'] == 1.0
    assert lines['reprise_pool_target_workers{role="small"}'] == 1.0
    assert lines["reprise_pool_monitor_heuristic_large"] == 0.71
    assert lines["reprise_pool_monitor_controlled_large"] == 1.16
    assert lines["reprise_pool_monitor_last_decision_timestamp_seconds"] == decision.decided_at.timestamp()
    assert lines['reprise_pool_workers{role="small"}'] >= 1.0
