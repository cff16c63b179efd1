"""The intake (jobs.intake) against the real Postgres and Redis: what it puts on the broker is what
send_task puts there and a real Celery worker runs it; submissions that share a commit each get their own
answer and their tenant's limit; a job whose message is lost is sent again by the reconciler; the job it
answers with is the row it wrote, as the ORM reads it back. tests/api/test_generations, test_idempotency,
test_limits and test_prefer_wait hold it to the API's other answers."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from core.params import GenerationParams
from core.settings import Settings
from db.engine import session_scope
from db.job_intake import Outcome
from db.jobs import NewJob
from db.models import Job
from db.tenants import TenantCredentials
from jobs.celery_app import make_celery_app
from jobs.dispatch import CeleryDispatcher
from jobs.intake import PING_IDLE_S, JobIntake, Submitted
from jobs.passes.reconcile import reconcile
from jobs.queues import Queue, TaskName, queue_depth
from jobs.representation import generation_object
from tests.support.queued import queued_messages

pytestmark = pytest.mark.integration

PROMPT = "a lighthouse on a cliff at dusk"


def _create(client: TestClient, who: TenantCredentials, **body: Any) -> Any:
    return client.post("/v1/generations", json={"prompt": PROMPT, **body}, headers=who.auth_headers)


def _queued(broker: redis.Redis) -> list[dict[str, Any]]:
    return queued_messages(broker, Queue.ADMIT.value)


def _without_ids(message: dict[str, Any]) -> dict[str, Any]:
    headers = {
        k: v for k, v in message["headers"].items() if k not in ("id", "root_id", "argsrepr", "origin")
    }
    properties = {
        k: v
        for k, v in message["properties"].items()
        if k not in ("correlation_id", "reply_to", "delivery_tag")
    }
    return {**message, "body": None, "headers": headers, "properties": properties}


def test_the_admit_message_is_the_one_send_task_writes(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis, api_settings: Settings
) -> None:
    job = _create(client, tenant).json()
    CeleryDispatcher(make_celery_app(api_settings)).admit(uuid.UUID(job["id"]))
    fast, celery = _queued(broker)
    assert _without_ids(fast) == _without_ids(celery)
    assert list(fast) == list(celery) and list(fast["headers"]) == list(celery["headers"])
    assert fast["headers"]["id"] == fast["headers"]["root_id"] == fast["properties"]["correlation_id"]
    assert fast["headers"]["argsrepr"] == celery["headers"]["argsrepr"] == repr([job["id"]])
    body = json.loads(base64.b64decode(fast["body"]))
    assert body == json.loads(base64.b64decode(celery["body"]))
    assert body[0] == [job["id"]]


def test_a_real_celery_worker_runs_the_admission(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis, api_settings: Settings
) -> None:
    app = make_celery_app(api_settings)
    admitted: list[str] = []
    ran = threading.Event()

    @app.task(name=TaskName.ADMIT.value)  # type: ignore[untyped-decorator]
    def admit(job_id: str) -> None:  # the admit worker's task, as a recorder
        admitted.append(job_id)
        ran.set()

    job = _create(client, tenant).json()
    with start_worker(
        app, pool="solo", perform_ping_check=False, queues=[Queue.ADMIT.value], loglevel="WARNING"
    ):
        assert ran.wait(30), "the worker did not run the admission"
    assert admitted == [job["id"]]
    assert queue_depth(broker, Queue.ADMIT) == 0


def test_submissions_that_share_a_commit_each_get_their_job(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis, api_settings: Settings
) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda i: _create(client, tenant, seed=i), range(48)))
    assert [answer.status_code for answer in answers] == [202] * 48
    ids = {answer.json()["id"] for answer in answers}
    assert {answer.json()["input"]["seed"] for answer in answers} == set(range(48))
    queued = {json.loads(base64.b64decode(m["body"]))[0][0] for m in _queued(broker)}
    assert queued == ids
    with session_scope(api_settings) as session:
        stored = session.scalar(
            select(func.count()).select_from(Job).where(Job.tenant_id == tenant.tenant_id)
        )
    assert stored == 48


def test_the_inflight_limit_holds_inside_a_batch(
    client: TestClient, make_tenant: Callable[..., TenantCredentials], broker: redis.Redis
) -> None:
    limited = make_tenant(inflight_limit=3)
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(lambda i: _create(client, limited, seed=i), range(12)))
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [202] * 3 + [429] * 9
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.json()["type"].endswith("inflight-limit") and refused.headers["retry-after"]
    assert queue_depth(broker, Queue.ADMIT) == 3


def test_concurrent_replays_of_one_key_in_a_batch_give_one_job(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis
) -> None:
    headers = {**tenant.auth_headers, "Idempotency-Key": "one-batch"}
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(
                lambda _: client.post("/v1/generations", json={"prompt": PROMPT}, headers=headers), range(8)
            )
        )
    assert sorted(answer.status_code for answer in answers) == [200] * 7 + [202], [a.text for a in answers]
    assert len({answer.json()["id"] for answer in answers}) == 1
    assert queue_depth(broker, Queue.ADMIT) == 1


def test_a_job_whose_message_is_lost_is_sent_by_the_reconciler(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    broker: redis.Redis,
    api_settings: Settings,
) -> None:
    down = make_client(redis_url="redis://127.0.0.1:9/0")  # nothing listens there
    answer = _create(down, tenant)
    assert answer.status_code == 202  # committed: the broker's outage only delays it
    assert queue_depth(broker, Queue.ADMIT) == 0
    sent = reconcile(
        api_settings.model_copy(update={"stuck_after_s": 0}), CeleryDispatcher(make_celery_app(api_settings))
    )
    assert sent >= 1
    queued = [json.loads(base64.b64decode(m["body"]))[0][0] for m in _queued(broker)]
    assert answer.json()["id"] in queued


def test_the_answer_is_the_row_as_it_was_written(
    client: TestClient, tenant: TenantCredentials, broker: redis.Redis, api_settings: Settings
) -> None:
    video = _create(client, tenant, kind="video", frames=4, webhook="http://127.0.0.1:9/hook", cache="off")
    assert video.status_code == 202, video.text
    job = video.json()
    assert job["kind"] == "video" and job["input"]["frames"] == 4 and job["urls"]["video"].endswith("/video")
    assert job["input"]["webhook"] == "http://127.0.0.1:9/hook" and job["status"] == "starting"
    assert video.headers["location"] == job["urls"]["self"]
    assert job["metrics"]["denoiser_evaluations"] == {} and job["created_at"]
    with session_scope(api_settings) as session:  # the answer built without reading the row back
        stored = session.get_one(Job, uuid.UUID(job["id"]))
        assert (
            generation_object(stored, base_url="http://testserver").model_dump(mode="json", by_alias=True)
            == job
        )
    bad = _create(client, tenant, frames=4)
    assert bad.status_code == 422 and "video" in bad.json()["detail"]
    assert queue_depth(broker, Queue.ADMIT) == 1


def test_a_connection_that_postgres_dropped_is_replaced_before_use(
    tenant: TenantCredentials, api_settings: Settings
) -> None:
    async def scenario() -> Submitted:
        intake = JobIntake(api_settings)
        try:
            await intake.submit(tenant.tenant_id, NewJob(GenerationParams(prompt=PROMPT, seed=1)))
            # What a restart of Postgres does to the intake's connection: the server side is gone, the
            # client does not know it yet.
            with session_scope(api_settings) as session:
                session.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                )
            await asyncio.sleep(PING_IDLE_S + 0.2)  # idle: pinged before its next use
            return await intake.submit(tenant.tenant_id, NewJob(GenerationParams(prompt=PROMPT, seed=2)))
        finally:
            await intake.close()

    assert asyncio.run(scenario()).outcome is Outcome.CREATED  # not 503 once Postgres is back
