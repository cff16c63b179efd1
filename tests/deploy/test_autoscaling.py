"""KEDA's ScaledObjects against the code: the Redis lists they count are the role's queues from the queue
table (jobs/queues.py), named as kombu's Redis transport names them under the broker options the Celery
app sets; the running count's SQL finds exactly the jobs a Deployment's pods run, in the real schema;
the decode pool reads the gauge the API exports."""

from __future__ import annotations

import re
import socket
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from kombu.transport.redis import PRIORITY_STEPS, Channel

from api.read_metrics import READ_QUEUE
from core.settings import Settings
from core.vocabulary import GPU_ROLES, Role
from db.engine import session_scope
from db.job_runs import claim_run, utcnow
from db.models import Job, Tenant
from jobs.celery_app import make_celery_app
from jobs.queues import QUEUES_BY_ROLE, Queue, decode_queue
from tests.deploy.conftest import by_kind

QUEUED_ROLES = (Role.LARGE, Role.SMALL)  # decode's queues are per node: read from Prometheus instead


def primary_role(queue: Queue) -> Role:
    """The role that takes a queue first: a queue two roles consume counts for the one that lists it
    earlier (cache_hit: the small pool's; large workers take it only when idle)."""
    consumers = [role for role in GPU_ROLES if queue in QUEUES_BY_ROLE[role]]
    return min(consumers, key=lambda role: QUEUES_BY_ROLE[role].index(queue))


def redis_lists(queue: Queue, settings: Settings) -> set[str]:
    """Every Redis list a queue's messages can wait in: one per priority step (kombu's Redis transport)."""
    options = make_celery_app(settings).conf.broker_transport_options
    prefix = options.get("global_keyprefix", "")
    steps = options.get("priority_steps", PRIORITY_STEPS)
    sep = options.get("sep", Channel.sep)
    return {prefix + (queue.value if step == 0 else f"{queue.value}{sep}{step}") for step in steps}


def expected_lists(role: Role, settings: Settings) -> set[str]:
    queues = [queue for queue in QUEUES_BY_ROLE[role] if primary_role(queue) is role]
    return {name for queue in queues for name in redis_lists(queue, settings)}


def triggers(scaled: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [t for t in scaled["spec"]["triggers"] if t["type"] == kind]


def scaled_object(manifests: list[dict[str, Any]], role: Role) -> dict[str, Any]:
    return by_kind(manifests, "ScaledObject")[f"reprise-{role.value}"]


@pytest.mark.parametrize("role", QUEUED_ROLES, ids=str)
def test_redis_triggers_count_every_list_of_the_roles_queues(
    role: Role, manifests: list[dict[str, Any]], service_settings: Settings
) -> None:
    scaled = scaled_object(manifests, role)
    counted = [t["metadata"]["listName"] for t in triggers(scaled, "redis")]
    assert len(counted) == len(set(counted))
    assert set(counted) == expected_lists(role, service_settings)
    assert "cache_hit\x06\x163" in expected_lists(Role.SMALL, service_settings)  # kombu's name, in full
    broker_url = by_kind(manifests, "Secret")["reprise-secrets"]["stringData"]["REPRISE_REDIS_URL"]
    redis_db = int(broker_url.rsplit("/", 1)[1])
    for trigger in triggers(scaled, "redis"):
        assert trigger["metadata"]["databaseIndex"] == str(redis_db), trigger["name"]
        assert trigger["authenticationRef"]["name"] == "reprise-redis"


def test_a_renamed_or_moved_queue_would_fail_the_check(service_settings: Settings) -> None:
    large = expected_lists(Role.LARGE, service_settings)
    assert "cache_miss" in large and "cache_hit" not in large  # hits are the small pool's backlog
    assert "cache_hit" in expected_lists(Role.SMALL, service_settings)
    renamed = {name.replace("cache_miss", "misses") for name in large}
    assert renamed != large


@pytest.mark.parametrize("role", QUEUED_ROLES, ids=str)
def test_the_formula_adds_every_trigger_once_at_a_pods_batch_of_jobs_per_pod(
    role: Role, manifests: list[dict[str, Any]]
) -> None:
    spec = scaled_object(manifests, role)["spec"]
    modifiers = spec["advanced"]["scalingModifiers"]
    names = sorted(t["name"] for t in spec["triggers"])
    terms = sorted(term.strip() for term in modifiers["formula"].split("+"))
    assert terms == names and "running" in names
    assert all(re.fullmatch(r"[a-z_][a-z0-9_]*", name) for name in names)
    # A pod denoises REPRISE_MAX_BATCH jobs at once: the target is that many jobs a pod.
    (config,) = [m for m in manifests if m["kind"] == "ConfigMap" and "REPRISE_MAX_BATCH" in m["data"]]
    assert (modifiers["target"], modifiers["metricType"]) == (
        config["data"]["REPRISE_MAX_BATCH"],
        "AverageValue",
    )
    (running,) = triggers(scaled_object(manifests, role), "postgresql")
    assert running["name"] == "running" and running["authenticationRef"]["name"] == "reprise-postgres"


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
    assert triggers(scaled, "redis") == []
    assert decode_queue("decode-1@pod") != Queue.DECODE.value
    (prometheus,) = triggers(scaled, "prometheus")
    assert READ_QUEUE in prometheus["metadata"]["query"]
    assert "max by (node)" in prometheus["metadata"]["query"]


# ---- the running count, in the real schema ---------------------------------------------------------------


def running_query(manifests: list[dict[str, Any]], role: Role) -> str:
    (running,) = triggers(scaled_object(manifests, role), "postgresql")
    query = running["metadata"]["query"]
    assert isinstance(query, str)
    assert f"LIKE 'reprise-{role.value}-%'" in query  # the Deployment's pods: <deployment>-<hash>-<id>
    return query


def _claimed_by(
    settings: Settings, tenant_id: uuid.UUID, pod: str, role: Role, monkeypatch: pytest.MonkeyPatch
) -> uuid.UUID:
    """A job claimed as a worker of `role` in pod `pod` claims it (its lease owner, workers.context)."""
    from workers.context import WorkerContext

    monkeypatch.setattr(socket, "gethostname", lambda: pod)
    owner = WorkerContext(settings, role).owner
    with session_scope(settings) as session:
        job = Job(
            tenant_id=tenant_id, prompt="a red circle", seed=7, steps=50, width=64, height=64, guidance=7.5
        )
        session.add(job)
        session.flush()
        job_id = job.id
    with session_scope(settings) as session:
        claim_run(session, job_id, owner=owner, lease_s=settings.lease_s, max_attempts=3)
    return job_id


@pytest.mark.integration
def test_the_running_count_finds_the_jobs_the_deployments_pods_run(
    manifests: list[dict[str, Any]], db_settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    settings = db_settings.model_copy(update={"blob_dir": tmp_path / "blobs"})
    with session_scope(settings) as session:
        tenant = Tenant(name=f"t-{uuid.uuid4().hex[:10]}", webhook_secret="whsec_dGVzdHNlY3JldA==")
        session.add(tenant)
        session.flush()
        tenant_id = tenant.id
    before = _counts(manifests, settings)
    # A large pod's job, a large pod's job after the monitor moved it to small, a small pod's job,
    # and a job whose lease expired (its worker died): 2 running on large pods, 1 on small ones.
    _claimed_by(settings, tenant_id, "reprise-large-6d9f7c8b5-x2x9k", Role.LARGE, monkeypatch)
    _claimed_by(settings, tenant_id, "reprise-large-6d9f7c8b5-q7w4z", Role.SMALL, monkeypatch)
    _claimed_by(settings, tenant_id, "reprise-small-5b8c9d7f6-m3n8p", Role.SMALL, monkeypatch)
    dead = _claimed_by(settings, tenant_id, "reprise-large-6d9f7c8b5-d3ad0", Role.LARGE, monkeypatch)
    with session_scope(settings) as session:
        job = session.get(Job, dead)
        assert job is not None
        job.lease_until = utcnow() - timedelta(seconds=1)
    after = _counts(manifests, settings)
    assert {role: after[role] - before[role] for role in QUEUED_ROLES} == {Role.LARGE: 2, Role.SMALL: 1}


def _counts(manifests: list[dict[str, Any]], settings: Settings) -> dict[Role, int]:
    url = settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url) as conn:
        return {role: _scalar(conn, running_query(manifests, role)) for role in QUEUED_ROLES}


def _scalar(conn: psycopg.Connection[Any], query: str) -> int:
    row = conn.execute(query.encode()).fetchone()
    assert row is not None
    return int(row[0])
