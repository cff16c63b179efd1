"""DiffServe's allocator on the live path: allocate_cascade against the real Postgres and Redis, with each
period's statistics, light stages and queues recorded as a running stack records them (db.stats, the
jobs' `cascade` column, the broker's lists), its decisions read back from cascade_decisions and by a
light worker (workers.cascade.threshold_now).

The periods of the stack the issue saw: a cold start (nothing measured), then the first minute of a
replay (a few arrivals, a queue of four: Little's law waits past the SLO, where the allocator once
chose threshold 1.00, every light image escalated), then a steady minute (speeds and 60 scores
measured, no queue)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis

from core.settings import Settings
from core.vocabulary import AdmissionOutcome, Allocator, Role
from db import cascade as cascade_db
from db import stats as db_stats
from db.engine import session_scope
from db.job_runs import utcnow
from db.models import CascadeDecision, Job, Tenant
from jobs.policies.cascade import EscalationCurve, feature_kind_for
from jobs.pools.actuator import PoolActuator
from jobs.pools.diffserve import allocate_cascade
from jobs.queues import Queue
from tests.conftest import fresh_database
from workers.cascade import threshold_now
from workers.context import WorkerContext

pytestmark = pytest.mark.integration

LIGHT_MS, HEAVY_MS = 600.0, 5000.0  # a light stage (4 steps) and a heavy run (50 steps) on the stack's CPU
# The lab discriminator's profiled f(t) (bench/results/lab/cascade.json): a grid at every 5% of its scores.
# Kept by hand as rows of measured values (fmt: skip), not one number a line.
PROFILED = EscalationCurve(
    (0.0, 1e-06, 1e-05, 4.3e-05, 0.000101, 0.000311, 0.000831, 0.002015, 0.005115, 0.008589, 0.010555,
     0.017395, 0.033419, 0.058079, 0.089553, 0.1342, 0.249197, 0.41064, 0.602682, 0.777491, 1.0),
    tuple(round(0.05 * i, 2) for i in range(21)),
    "profiled on held-out light images",
)  # fmt: skip


class TwoWorkers(PoolActuator):
    """The stack's pool as the broker answers it: one worker per model; every move accepted."""

    def __init__(self) -> None:
        self.pool = {"celery@large-1": Role.LARGE, "celery@small-1": Role.SMALL}

    def roles(self) -> dict[str, Role]:
        return dict(self.pool)

    def switch(self, worker: str, role: Role) -> bool:
        self.pool[worker] = role
        return True


@pytest.fixture(scope="module")
def settings(
    service_settings: Settings, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """A database of its own (no decision before the first), this run's Redis database for the queues,
    the lab cascade of docs/cascade.md: lab:large at 4 steps as the light model, 50 as the heavy."""
    with fresh_database(service_settings) as fresh:
        yield fresh.model_copy(
            update={
                "redis_url": redis_url,
                "blob_dir": tmp_path_factory.mktemp("blobs"),
                "allocator": Allocator.DIFFSERVE,
                "small_model": "lab:large",
                "large_model": "lab:large",
                "steps": 50,
                "cascade_light_steps": 4,
                "cascade_threshold": 0.5,
                "monitor_period_s": 60,
            }
        )


@pytest.fixture
def broker(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.broker_url)
    client.delete(Queue.CASCADE_LIGHT.value, Queue.CASCADE_HEAVY.value)
    yield client
    client.delete(Queue.CASCADE_LIGHT.value, Queue.CASCADE_HEAVY.value)
    client.close()


def _minute(minutes_ago: int) -> datetime:
    now = utcnow()
    return now.replace(second=0, microsecond=0) - timedelta(minutes=minutes_ago)


def _store_discriminator(settings: Settings) -> int:
    light = settings.model_source("small")
    with session_scope(settings) as session:
        return cascade_db.save_discriminator(
            session,
            light_model=light,
            heavy_model=settings.model_source("large"),
            features=feature_kind_for(light).value,
            accuracy=0.92,
            report={"curve": PROFILED.as_json()},
            model=b"not loaded by the allocator",
        )


def _run_period(settings: Settings, start: datetime, *, scores: list[float], heavy_runs: int) -> None:
    """What the stack records in one minute: an admission (a miss) per light stage, each light stage's
    service and verdict on its job, and the heavy runs of the escalated."""
    with session_scope(settings) as session:
        tenant = Tenant(name=f"cascade-{uuid.uuid4().hex[:8]}", webhook_secret="whsec_AAAA")
        session.add(tenant)
        session.flush()
        for i, score in enumerate(scores):
            at = start + timedelta(seconds=(i + 0.5) * 60 / len(scores))
            db_stats.record_admission(session, outcome=AdmissionOutcome.SEARCHED_MISS, at=at)
            db_stats.record_service(session, role=Role.SMALL.value, service_ms=LIGHT_MS, steps=4, at=at)
            stage = cascade_db.LightStage(
                light_model="lab:large",
                light_evals={"lab:large": 4},
                light_ms=LIGHT_MS,
                score=score,
                threshold=0.5,
                escalated=score < 0.5,
                discriminator_version=1,
            )
            job = Job(
                tenant_id=tenant.id, prompt=f"a fox {i}", seed=i, steps=50, width=64, height=64, guidance=7.5
            )
            job.route, job.admitted_at, job.cascade = "miss", at, stage.as_json()
            session.add(job)
        for i in range(heavy_runs):
            at = start + timedelta(seconds=30 + i)
            db_stats.record_service(session, role=Role.LARGE.value, service_ms=HEAVY_MS, steps=50, at=at)


def _light_worker_threshold(settings: Settings) -> float:
    return threshold_now(WorkerContext(settings, Role.SMALL))  # a fresh context: nothing cached


def _decisions(settings: Settings) -> list[CascadeDecision]:
    with session_scope(settings) as session:
        rows = cascade_db.recent_decisions(session, 10)
        session.expunge_all()
        return rows[::-1]


def test_the_live_allocator_starts_cold_escalates_least_when_infeasible_then_plans(
    settings: Settings, broker: redis.Redis
) -> None:
    actuator = TwoWorkers()
    version = _store_discriminator(settings)

    # 1. A cold start: the stack is up, nothing ran. The last complete minute (the beat's own window).
    cold = allocate_cascade(settings, actuator)
    assert cold is not None and cold.threshold == settings.cascade_threshold == 0.5
    assert cold.feasible and cold.objective is None and cold.solve_ms == 0.0
    assert (cold.target_heavy, cold.target_light, cold.applied_heavy, cold.applied_light) == (1, 1, 1, 1)
    assert cold.solution["cold_start"].startswith("no model's speed is known yet")
    assert "demand_estimate" not in cold.inputs  # the first measured period starts the EWMA
    assert cold.switches == []
    assert _light_worker_threshold(settings) == 0.5

    # 2. The replay's first minute: 6 light stages (all escalated at 0.5), 2 heavy runs, 2 light stages
    # and 2 escalations queued. 0.1 misses/s: Little's law waits 2 / 0.1 = 20 s at each stage, and
    # 0.6 + 20 + 5 + 20 s is past the 2.8 x 5 = 14 s SLO whatever the split. Throughput alone would take
    # t = 1.00 (one heavy worker serves 0.2/s >= 1.05 x (0.1 + 2/60) + 1.05 x 2/60): the allocator once
    # did, and escalated every light image. Infeasible: the lowest threshold, the fewest escalations.
    first = _minute(5)
    _run_period(settings, first, scores=[0.001, 0.002, 0.02, 0.05, 0.2, 0.4], heavy_runs=2)
    broker.rpush(Queue.CASCADE_LIGHT.value, "light-1", "light-2")
    broker.rpush(Queue.CASCADE_HEAVY.value, "heavy-1", "heavy-2")
    queued = allocate_cascade(settings, actuator, window=(first, first + timedelta(minutes=1)))
    assert queued is not None and not queued.feasible and queued.objective is None
    assert queued.threshold == PROFILED.thresholds[0] == 0.0 and queued.solution["escalated"] == 0.0
    assert queued.solution["fallback"].startswith("infeasible: no allocation meets the 14 s SLO")
    assert (queued.target_heavy, queued.target_light) == (1, 1)  # the heavy pool's floor: one
    inputs = queued.inputs
    assert inputs["step_ms_sources"] == {"large": "measured", "small": "measured"}
    assert (inputs["light_latency_s"], inputs["heavy_latency_s"]) == (0.6, 5.0)
    assert inputs["slo_s"] == pytest.approx(14.0)
    assert inputs["light_wait_s"] == pytest.approx(20.0) and inputs["heavy_wait_s"] == pytest.approx(20.0)
    assert inputs["demand_estimate"]["cascade_rps"] == pytest.approx(0.1)
    assert inputs["curve"]["source"] == f"profiled: discriminator {version}"  # 6 scores < 50
    assert _light_worker_threshold(settings) == 0.0

    # 3. A steady minute: 60 light stages scored evenly over (0, 1), 30 heavy runs, nothing queued.
    # Demand: EWMA 0.5 x 1.0 + 0.5 x 0.1 = 0.55/s. One light worker serves 1 / 0.6 s = 1.67/s >= 0.58;
    # the other, heavy, 0.2/s: f(t) <= 0.2 / (1.05 x 0.55) = 0.346. f measured on the profiled grid is
    # 0.25 at t = 0.249197 and 0.417 at 0.41064: t = 0.249197, and the SLO holds (0.6 + 5 <= 14 s).
    broker.delete(Queue.CASCADE_LIGHT.value, Queue.CASCADE_HEAVY.value)
    _steady_minute_plans_within_demand(settings, actuator, first + timedelta(minutes=1))
    rows = _decisions(settings)
    assert [(d.threshold, d.feasible, d.target_heavy, d.target_light) for d in rows] == [
        (0.5, True, 1, 1),
        (0.0, False, 1, 1),
        (0.249197, True, 1, 1),
    ]


def _steady_minute_plans_within_demand(settings: Settings, actuator: TwoWorkers, steady: datetime) -> None:
    """Step 3's minute: its decision and what a light worker reads."""
    _run_period(settings, steady, scores=[(i + 0.5) / 60 for i in range(60)], heavy_runs=30)
    planned = allocate_cascade(settings, actuator, window=(steady, steady + timedelta(minutes=1)))
    assert planned is not None and planned.feasible and planned.solution["fallback"] is None
    assert planned.threshold == 0.249197 and planned.objective == 0.249197
    assert planned.solution["escalated"] == pytest.approx(0.25)
    assert (planned.target_heavy, planned.target_light) == (1, 1)
    assert planned.inputs["demand_estimate"]["cascade_rps"] == pytest.approx(0.55)
    assert planned.inputs["curve"]["source"] == "measured: 60 scores this period"
    assert _light_worker_threshold(settings) == 0.249197
