"""KEDA's ScaledObjects against the code: the large and small pools each scale on one `postgresql` trigger
whose query, read from the rendered manifests and run against the test suite's Postgres, counts the jobs
waiting for the pool (by the route the dispatcher sends them on under the manifests' settings) and the
jobs its Deployment's pods run, at REPRISE_MAX_BATCH jobs per pod; the decode pool reads the gauge the
API exports."""

from __future__ import annotations

import socket
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from api.read_metrics import READ_QUEUE
from core.settings import Settings
from core.vocabulary import GPU_ROLES, JobStatus, Role, Route
from db.engine import session_scope
from db.job_runs import utcnow
from db.models import Job, Tenant
from jobs.dispatch import route_task
from jobs.queues import QUEUES_BY_ROLE, ROUTES, Queue, decode_queue
from tests.deploy.conftest import by_kind
from tests.deploy.test_kubernetes import configured

QUEUED_ROLES = (Role.LARGE, Role.SMALL)  # decode's queues are per node: read from Prometheus instead


def primary_role(queue: Queue) -> Role:
    """The role that takes a queue first: a queue two roles consume counts for the one that lists it
    earlier (cache_hit: the small pool's; large workers take it only when idle)."""
    consumers = [role for role in GPU_ROLES if queue in QUEUES_BY_ROLE[role]]
    return min(consumers, key=lambda role: QUEUES_BY_ROLE[role].index(queue))


def pool_of(route: Route, settings: Settings) -> Role:
    """The pool a job of `route` waits for: the queue the dispatcher sends it on, and who takes that."""
    return primary_role(ROUTES[route_task(route, settings)])


def triggers(scaled: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [t for t in scaled["spec"]["triggers"] if t["type"] == kind]


def scaled_object(manifests: list[dict[str, Any]], role: Role) -> dict[str, Any]:
    return by_kind(manifests, "ScaledObject")[f"reprise-{role.value}"]


def pool_query(manifests: list[dict[str, Any]], role: Role) -> str:
    (trigger,) = scaled_object(manifests, role)["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    query = trigger["metadata"]["query"]
    assert isinstance(query, str)
    return query


@pytest.mark.parametrize("role", QUEUED_ROLES, ids=str)
def test_one_postgres_trigger_at_a_pods_batch_of_jobs_per_pod(
    role: Role, manifests: list[dict[str, Any]]
) -> None:
    spec = scaled_object(manifests, role)["spec"]
    (trigger,) = spec["triggers"]  # no Redis list, no formula: the jobs table only
    assert trigger["type"] == "postgresql" and trigger["authenticationRef"]["name"] == "reprise-postgres"
    assert "scalingModifiers" not in spec["advanced"]
    # A pod denoises REPRISE_MAX_BATCH jobs at once: the target is that many jobs a pod.
    config = by_kind(manifests, "ConfigMap")["reprise-config"]["data"]
    assert trigger["metadata"]["targetQueryValue"] == config["REPRISE_MAX_BATCH"]
    assert trigger.get("metricType", "AverageValue") == "AverageValue"
    assert trigger["metadata"]["activationTargetQueryValue"] == "0"  # the first waiting job wakes the pool
    assert f"LIKE 'reprise-{role.value}-%'" in pool_query(manifests, role)  # pods: <deployment>-<hash>-<id>
    assert not by_kind(manifests, "TriggerAuthentication").keys() - {"reprise-postgres"}


def test_bounds_and_scale_in_pace(manifests: list[dict[str, Any]]) -> None:
    """Misses always have a worker (and reads a node); hits can fall back on idle large workers."""
    floors = {Role.LARGE: 1, Role.SMALL: 0, Role.DECODE: 1}
    for role in GPU_ROLES:
        spec = scaled_object(manifests, role)["spec"]
        assert spec["minReplicaCount"] == floors[role], role
        assert spec["maxReplicaCount"] >= max(1, spec["minReplicaCount"]), role
        assert spec["cooldownPeriod"] >= 300, role
        down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
        assert down["stabilizationWindowSeconds"] >= 300 and down["policies"][0]["value"] == 1, role


def test_decode_scales_on_the_read_path_gauge(manifests: list[dict[str, Any]]) -> None:
    """A decode node's queue is decode.<node>: no fixed list holds the pool's backlog, and the route
    table's `decode` list is never published to."""
    scaled = scaled_object(manifests, Role.DECODE)
    assert decode_queue("decode-1@pod") != Queue.DECODE.value
    (prometheus,) = scaled["spec"]["triggers"]
    assert prometheus["type"] == "prometheus"
    assert READ_QUEUE in prometheus["metadata"]["query"]
    assert "max by (node)" in prometheus["metadata"]["query"]


# ---- the query, in the real schema ------------------------------------------------------------------------


def _job(settings: Settings, tenant_id: uuid.UUID, **values: Any) -> None:
    with session_scope(settings) as session:
        job = Job(
            tenant_id=tenant_id, prompt="a red circle", seed=7, steps=50, width=64, height=64, guidance=7.5
        )
        for key, value in values.items():
            setattr(job, key, value)
        session.add(job)


def _owner(settings: Settings, pod: str, role: Role, monkeypatch: pytest.MonkeyPatch) -> str:
    """The lease owner a worker of `role` in pod `pod` writes (workers.context)."""
    from workers.context import WorkerContext

    monkeypatch.setattr(socket, "gethostname", lambda: pod)
    return WorkerContext(settings, role).owner


def _counts(manifests: list[dict[str, Any]], settings: Settings) -> dict[Role, int]:
    url = settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url) as conn:
        counts = {}
        for role in QUEUED_ROLES:
            row = conn.execute(pool_query(manifests, role).encode()).fetchone()
            assert row is not None
            counts[role] = int(row[0])
        return counts


@pytest.mark.integration
def test_the_query_counts_each_pools_waiting_and_running_jobs(
    manifests: list[dict[str, Any]], db_settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    pods = configured(manifests, monkeypatch)  # the settings the pods run with: where each route goes
    assert {route: pool_of(route, pods) for route in Route} == {
        Route.MISS: Role.LARGE,
        Route.HEAVY: Role.LARGE,
        Route.HIT: Role.SMALL,
    }
    settings = db_settings.model_copy(update={"blob_dir": tmp_path / "blobs"})
    with session_scope(settings) as session:
        tenant = Tenant(name=f"t-{uuid.uuid4().hex[:10]}", webhook_secret="whsec_dGVzdHNlY3JldA==")
        session.add(tenant)
        session.flush()
        tenant_id = tenant.id
    before = _counts(manifests, settings)
    live, lapsed = utcnow() + timedelta(seconds=30), utcnow() - timedelta(seconds=1)
    large_pod = _owner(settings, "reprise-large-6d9f7c8b5-x2x9k", Role.LARGE, monkeypatch)
    moved_pod = _owner(settings, "reprise-large-6d9f7c8b5-q7w4z", Role.SMALL, monkeypatch)
    small_pod = _owner(settings, "reprise-small-5b8c9d7f6-m3n8p", Role.SMALL, monkeypatch)
    waiting = JobStatus.STARTING.value
    for route in Route:  # waiting for its pool: one admitted job of each route, and one not admitted
        _job(settings, tenant_id, status=waiting, route=route.value)
    _job(settings, tenant_id, status=waiting, route=None)  # the admit pool's: no GPU pool's
    running = JobStatus.PROCESSING.value
    _job(settings, tenant_id, status=running, route="miss", lease_owner=large_pod, lease_until=live)
    _job(settings, tenant_id, status=running, route="hit", lease_owner=moved_pod, lease_until=live)
    _job(settings, tenant_id, status=running, route="hit", lease_owner=small_pod, lease_until=live)
    _job(settings, tenant_id, status=running, route="miss", lease_owner=small_pod, lease_until=live)
    # a run whose worker died (lease lapsed): the reconciler sends it again, so it waits for its pool
    _job(settings, tenant_id, status=running, route="hit", lease_owner=large_pod, lease_until=lapsed)
    for ended in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED):  # done: nobody's
        for route in Route:
            _job(
                settings,
                tenant_id,
                status=ended.value,
                route=route.value,
                lease_owner=large_pod,
                lease_until=live,
            )
    after = _counts(manifests, settings)
    # large: a miss and an escalation waiting, a miss and a moved pod's hit running on large pods.
    # small: a hit waiting, a lapsed hit waiting again, a hit and a co-hosted miss running on small pods.
    assert {role: after[role] - before[role] for role in QUEUED_ROLES} == {Role.LARGE: 4, Role.SMALL: 4}


@pytest.mark.integration
def test_the_query_sees_each_state_change(
    manifests: list[dict[str, Any]], db_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One miss through its life: waiting (+1 large), running on a large pod (+1), done (0)."""
    with session_scope(db_settings) as session:
        tenant = Tenant(name=f"t-{uuid.uuid4().hex[:10]}", webhook_secret="whsec_dGVzdHNlY3JldA==")
        session.add(tenant)
        session.flush()
        tenant_id = tenant.id
    owner = _owner(db_settings, "reprise-large-6d9f7c8b5-x2x9k", Role.LARGE, monkeypatch)
    base = _counts(manifests, db_settings)[Role.LARGE]
    job_id = uuid.uuid4()
    _job(db_settings, tenant_id, id=job_id, status=JobStatus.STARTING.value, route="miss")
    seen = [_counts(manifests, db_settings)[Role.LARGE] - base]
    for status, lease in (
        (JobStatus.PROCESSING, owner),
        (JobStatus.SUCCEEDED, None),
        (JobStatus.FAILED, None),
    ):
        with session_scope(db_settings) as session:
            job = session.get(Job, job_id)
            assert job is not None
            job.status, job.lease_owner, job.lease_until = (
                status.value,
                lease,
                utcnow() + timedelta(seconds=30),
            )
        seen.append(_counts(manifests, db_settings)[Role.LARGE] - base)
    assert seen == [1, 1, 0, 0]
