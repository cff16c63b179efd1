"""A generation's progress (on its row, announced on Redis) and the metrics a worker process exports,
against the real database, Redis and the tiny models."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack

import pytest
import redis
from prometheus_client import REGISTRY

from core.settings import Settings
from core.vocabulary import JobStatus, Role
from db.engine import session_scope
from db.job_runs import claim_run
from db.models import Job
from jobs.job_events import job_progress_channel
from tests.workers.conftest import make_job, make_tenant
from workers.context import WorkerContext
from workers.generation import generate_job
from workers.run_watch import RunWatch
from workers.stages import job_stages

pytestmark = pytest.mark.integration


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _listen(
    settings: Settings, job_id: uuid.UUID, received: list[dict[str, int]], ready: threading.Event
) -> None:
    client = redis.Redis.from_url(settings.broker_url)
    pubsub = client.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(job_progress_channel(job_id))
    ready.set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message is not None:
            received.append(json.loads(message["data"]))
            if "step" in received[-1] and received[-1]["step"] == received[-1]["total"]:
                break
    pubsub.close()


def test_a_running_generation_reports_its_progress_and_the_worker_counts_it(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext]
) -> None:
    tenant = make_tenant(task_settings)
    job_id = make_job(task_settings, tenant, "a red circle", route="miss", admission_outcome="searched_miss")
    received: list[dict[str, int]] = []
    ready = threading.Event()
    listener = threading.Thread(target=_listen, args=(task_settings, job_id, received, ready))
    listener.start()
    ready.wait(10)
    context = context_for(Role.LARGE)
    model = context.runtime().model_name
    before = {
        "jobs": _sample(
            "reprise_worker_jobs_total", role="large", model=model, route="miss", outcome="succeeded"
        ),
        "evals": _sample("reprise_worker_denoiser_evaluations_total", role="large", model=model),
        "steps": _sample("reprise_worker_step_duration_seconds_count", role="large", model=model),
        "k": _sample("reprise_worker_skipped_steps_count", role="large", route="miss"),
        "denoise": _sample(
            "reprise_worker_job_stage_seconds_count", role="large", route="miss", stage="denoise"
        ),
    }
    with job_stages() as clock:
        generate_job(context, job_id)
    listener.join(70)
    steps = 50
    # Announced: its start (no step), its first step at once, its last; a few in between at most.
    progress = [message for message in received if "step" in message]
    assert {} in received
    assert progress[0] == {"step": 1, "total": steps} and progress[-1] == {"step": steps, "total": steps}
    assert [m["step"] for m in progress] == sorted({m["step"] for m in progress})
    with session_scope(task_settings) as session:
        job = session.get_one(Job, job_id)
        assert job.status == JobStatus.SUCCEEDED and (job.progress_step, job.progress_total) == (steps, steps)
        # Its worker time by stage, in the run's order: the model's calls and the platform's work apart.
        recorded = dict(job.stages_ms or {})
    assert {"claim", "encode_prompt", "denoise", "store", "complete"} <= set(recorded)
    assert recorded["denoise"] > 0 and all(ms >= 0 for ms in recorded.values())
    assert recorded["denoise"] <= clock.ms["denoise"] + 1e-3  # the row holds what the clock had then
    after = {
        "jobs": _sample(
            "reprise_worker_jobs_total", role="large", model=model, route="miss", outcome="succeeded"
        ),
        "evals": _sample("reprise_worker_denoiser_evaluations_total", role="large", model=model),
        "steps": _sample("reprise_worker_step_duration_seconds_count", role="large", model=model),
        "k": _sample("reprise_worker_skipped_steps_count", role="large", route="miss"),
    }
    assert after["jobs"] - before["jobs"] == 1
    assert after["evals"] - before["evals"] == steps
    assert after["steps"] - before["steps"] == steps
    assert after["k"] - before["k"] == 1
    assert (
        _sample("reprise_worker_job_stage_seconds_count", role="large", route="miss", stage="denoise")
        - before["denoise"]
        == 1
    )


def test_progress_is_written_at_the_first_step_then_at_most_every_period_and_at_the_last(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext]
) -> None:
    tenant = make_tenant(task_settings)
    job_id = make_job(task_settings, tenant, "a blue square", route="miss", admission_outcome="searched_miss")
    context = context_for(Role.LARGE)
    with session_scope(task_settings) as session:
        claim_run(session, job_id, owner=context.owner, lease_s=60, max_attempts=3)
    watch = RunWatch(task_settings, context.broker, progress_every_s=3600)
    with watch.watching(job_id, context.owner) as run:
        for step in range(1, 21):
            run.report(step, 20)
    assert run.reported == [(1, 20), (20, 20)]
    with session_scope(task_settings) as session:
        assert session.get_one(Job, job_id).progress_step == 20  # written by the time the run ends
        session.get_one(Job, job_id).lease_owner = "someone-else"
    with RunWatch(task_settings, context.broker, progress_every_s=0).watching(job_id, context.owner) as run:
        run.report(5, 20)  # this run no longer holds the lease
    with session_scope(task_settings) as session:
        assert session.get_one(Job, job_id).progress_step == 20  # only the holder's run reports


def test_one_query_tells_every_watched_run_of_its_cancel(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext]
) -> None:
    tenant = make_tenant(task_settings)
    jobs = [make_job(task_settings, tenant, f"a red square {i}", route="miss") for i in range(3)]
    context = context_for(Role.LARGE)
    watch = RunWatch(task_settings, context.broker, cancel_every_s=0.05)
    with ExitStack() as runs:
        watched = [runs.enter_context(watch.watching(job_id, context.owner)) for job_id in jobs]
        with session_scope(task_settings) as session:
            session.get_one(Job, jobs[1]).cancel_requested = True
        deadline = time.monotonic() + 10
        while not watched[1].canceled and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [run.canceled for run in watched] == [False, True, False]
    time.sleep(0.2)
    assert watch._thread is None  # the watch's thread ends with its last run
