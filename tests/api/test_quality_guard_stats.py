"""The quality guard in /v1/stats (global scope) and in Prometheus /metrics: target, estimate, the
table in use and the last change, from the audits and decisions the pass wrote."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete

from core.settings import Settings
from db import quality_guard as guard_db
from db.engine import session_scope
from db.models import QualityAudit, QualityGuardDecision
from db.tenants import TenantCredentials
from jobs.passes.quality_guard import run_guard

pytestmark = pytest.mark.integration

GUARD = {
    "quality_guard": True,
    "quality_guard_min_sample": 4,
    "k_table": "nirvana-t2t",
    "steps": 50,
    "capture_steps": [5, 10, 15, 20, 25],
}


@pytest.fixture
def guarded(api_settings: Settings) -> Iterator[Settings]:
    """Eight audits of 50-step hits (four losing 0.3 at similarity 0.66, k 5) and the pass's change."""
    settings = api_settings.model_copy(update=GUARD)
    _clear(settings)
    with session_scope(settings) as session:
        for similarity, drop in [(0.66, 0.3)] * 4 + [(0.71, 0.0)] * 4:
            guard_db.record_audit(
                session,
                job_id=uuid.uuid4(),
                similarity=similarity,
                k=5,
                steps=50,
                hit_score=0.5,
                fresh_score=0.5 + drop,
                scorer="lab-judge",
            )
    decision = run_guard(settings)
    assert decision is not None and decision.changed
    yield settings
    _clear(settings)


def _clear(settings: Settings) -> None:
    with session_scope(settings) as session:
        session.execute(delete(QualityAudit))
        session.execute(delete(QualityGuardDecision))


def test_stats_show_the_guard_its_estimate_and_its_table(
    make_client: Callable[..., TestClient], admin: TenantCredentials, guarded: Settings
) -> None:
    client = make_client(**GUARD)
    guard = client.get("/v1/stats", headers=admin.auth_headers).json()["quality_guard"]
    assert (guard["enabled"], guard["target"], guard["audit_fraction"]) == (True, 0.02, 0.1)
    assert (guard["scorer"], guard["audits"], guard["drop_mean"]) == ("lab-judge", 8, 0.15)
    assert guard["configured_table"] == ">0.95:25,>0.9:20,>0.85:15,>0.75:10,>0.65:5"
    assert guard["table"] == ">0.95:25,>0.9:20,>0.85:15,>0.75:10,>0.675:5"
    assert {"similarity_lo": 0.65, "similarity_hi": 0.675, "k": 5, "n": 4, "drop_mean": 0.3} in guard["bins"]
    change = guard["last_change"]
    assert change["table"] == guard["table"] and change["audits"] == 8
    assert [(c["k"], c["old"], c["new"], c["reason"]) for c in change["changes"]] == [
        (5, 0.65, 0.675, "tighten")
    ]

    # The guard off: the configured table, whatever the guard decided before.
    off = make_client(**(GUARD | {"quality_guard": False}))
    guard = off.get("/v1/stats", headers=admin.auth_headers).json()["quality_guard"]
    assert guard["enabled"] is False and guard["table"] == guard["configured_table"]


def test_a_tenant_does_not_see_the_guard(
    client: TestClient, make_tenant: Callable[..., TenantCredentials]
) -> None:
    assert client.get("/v1/stats", headers=make_tenant().auth_headers).json()["quality_guard"] is None


def test_metrics_expose_the_guard(make_client: Callable[..., TestClient], guarded: Settings) -> None:
    lines = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in make_client(**GUARD).get("/metrics").text.splitlines()
        if line.startswith("reprise_quality_guard")
    }
    assert lines["reprise_quality_guard_enabled"] == 1.0 and lines["reprise_quality_guard_target"] == 0.02
    assert (
        lines["reprise_quality_guard_drop_estimate"] == 0.15
        and lines["reprise_quality_guard_audits_total"] == 8.0
    )
    assert lines['reprise_quality_guard_threshold{k="5"}'] == 0.675
    assert lines['reprise_quality_guard_threshold{k="25"}'] == 0.95
    assert lines["reprise_quality_guard_last_change_timestamp_seconds"] > 0
