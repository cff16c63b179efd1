"""Every effect of a GPU run happens once per job: a hit that runs as a miss
is counted as a miss everywhere, once; a task redelivered after it ended, or after its worker died
between two effects, counts no use, statistic, cache entry or webhook event twice."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from core.settings import Settings
from core.vocabulary import AdmissionOutcome, Role, WebhookEvent
from db import cache, stats
from db.blobs import keys
from db.engine import session_scope
from db.models import CacheEntry, CacheState, Job
from jobs.queues import TaskName
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers import operation
from workers.context import WorkerContext
from workers.generation import generate_job, reuse_job
from workers.kinds.image import cache_fill

pytestmark = pytest.mark.integration

PROMPT = "a small red circle left of a blue square"
HOOK = {"webhook_url": "https://hooks.example.com/r", "webhook_events_filter": ["start", "completed"]}
K = 20


class WorkerDied(Exception):
    """Raised from a patched step: the worker died there, before the job completed."""


def _period_start(seed: int) -> datetime:
    """A statistics interval of this test's own, long ago, so no other test counts into it."""
    return datetime(2001, 1, 1, tzinfo=UTC) + timedelta(minutes=seed % 500_000)


def _admitted_hit(settings: Settings, tenant: uuid.UUID, entry_id: uuid.UUID, at: datetime) -> uuid.UUID:
    """A job admission routed as a hit at `at`, counted in that interval as admission counts it."""
    job_id = make_job(
        settings,
        tenant,
        PROMPT,
        route="hit",
        k=K,
        source_entry_id=entry_id,
        admission_outcome="hit",
        admitted_at=at,
        **HOOK,
    )
    with session_scope(settings) as session:
        stats.record_admission(session, outcome=AdmissionOutcome.HIT, k=K, at=at)
    return job_id


def _interval(settings: Settings, at: datetime) -> stats.PeriodStats:
    with session_scope(settings) as session:
        return stats.stats_between(session, since=at, until=at + timedelta(seconds=60))


def _events(dispatcher: RecordingDispatcher, job_id: uuid.UUID) -> list[str]:
    return [sent.args[1] for sent in dispatcher.of(TaskName.DELIVER_WEBHOOK) if sent.args[0] == str(job_id)]


def _entry_without_state(settings: Settings) -> uuid.UUID:
    """A live entry whose state at K was evicted after admission chose it (SourceVanished)."""
    with session_scope(settings) as session:
        entry = CacheEntry(
            scope="shared", model_family="tiny-sd", prompt=PROMPT, text_embedding=[0.1] * 384, bytes=10
        )
        session.add(entry)
        session.flush()
        return entry.id


def test_a_hit_run_as_a_miss_counts_as_a_miss_everywhere_once(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    tenant = make_tenant(task_settings)
    at = _period_start(uuid.uuid4().int)
    job_id = _admitted_hit(task_settings, tenant, _entry_without_state(task_settings), at)
    assert (_interval(task_settings, at).cache.hits, _interval(task_settings, at).k_rates) == (1, {K: 1.0})

    reuse_job(context_for(Role.SMALL), job_id)  # the state is gone: rerouted to the large pool
    reuse_job(context_for(Role.SMALL), job_id)  # the hit message redelivered: nothing counted again

    period = _interval(task_settings, at)
    assert (period.cache.arrivals, period.cache.hits, period.cache.misses) == (1, 0, 1)
    assert (period.cache.hit_rate, period.k_rates, period.cache.k_histogram) == (0.0, {}, {})
    with session_scope(task_settings) as session:
        job = session.get_one(Job, job_id)
        # the row /v1/stats counts from (db.jobs.cache_outcomes: route and k)
        assert (job.route, job.admission_outcome, job.k) == ("miss", "searched_miss", None)
    assert dispatcher.of(TaskName.GENERATE)  # on the large pool's queue

    generate_job(context_for(Role.LARGE), job_id)
    generate_job(context_for(Role.LARGE), job_id)
    assert _events(dispatcher, job_id) == [WebhookEvent.STARTED.value, WebhookEvent.COMPLETED.value]


def _uses(settings: Settings, entry_id: uuid.UUID) -> tuple[int, int]:
    with session_scope(settings) as session:
        entry = session.get_one(CacheEntry, entry_id)
        state = session.scalar(
            select(CacheState.access_count).where(CacheState.entry_id == entry_id, CacheState.k == K)
        )
        return entry.access_count, int(state or 0)


def _served(settings: Settings, since: datetime) -> dict[str, int]:
    with session_scope(settings) as session:
        period = stats.stats_between(session, since=since, until=since + timedelta(days=1))
    return {role: service.count for role, service in period.service.items()}


def _entries(settings: Settings, job_id: uuid.UUID) -> int:
    with session_scope(settings) as session:
        return len(list(session.scalars(select(CacheEntry.id).where(CacheEntry.source_job_id == job_id))))


def _die_at(monkeypatch: pytest.MonkeyPatch, target: Any, name: str) -> None:
    def died(*args: Any, **kwargs: Any) -> Any:
        raise WorkerDied(name)

    monkeypatch.setattr(target, name, died)


@pytest.mark.parametrize("crash", [None, "insert_entry", "complete"])
@pytest.mark.parametrize("task", ["generate", "reuse"])
def test_a_redelivered_task_counts_every_effect_once(
    task_settings: Settings,
    context_for: Callable[[Role], WorkerContext],
    dispatcher: RecordingDispatcher,
    monkeypatch: pytest.MonkeyPatch,
    task: str,
    crash: str | None,
) -> None:
    settings = task_settings.model_copy(update={"cache_all": True})  # hits cache their results too
    context = WorkerContext(settings, Role.LARGE if task == "generate" else Role.SMALL, dispatcher=dispatcher)
    tenant = make_tenant(settings)
    source = make_job(settings, tenant, PROMPT, route="miss", admission_outcome="searched_miss")
    generate_job(context_for(Role.LARGE), source)
    entry_id = uuid.uuid5(cache_fill.ENTRY_NAMESPACE, str(source))
    if task == "generate":
        job_id = make_job(settings, tenant, PROMPT, route="miss", admission_outcome="searched_miss", **HOOK)
        run = generate_job
    else:
        job_id = _admitted_hit(settings, tenant, entry_id, _period_start(uuid.uuid4().int))
        run = reuse_job
    uses, since = _uses(settings, entry_id), datetime.now(UTC) - timedelta(minutes=2)
    served = _served(settings, since)

    if crash is not None:  # the worker dies after the run's first effects, before completing
        with monkeypatch.context() as patched:
            _die_at(patched, cache if crash == "insert_entry" else operation, crash)
            with pytest.raises(WorkerDied):
                run(context, job_id)
    run(context, job_id)  # the broker hands the message out again (after the crash, or after success)
    run(context, job_id)

    with session_scope(settings) as session:
        assert session.get_one(Job, job_id).status == "succeeded"
    role = context.role.value
    assert _served(settings, since).get(role, 0) == served.get(role, 0) + 1
    assert _entries(settings, job_id) == 1
    assert _events(dispatcher, job_id) == [WebhookEvent.STARTED.value, WebhookEvent.COMPLETED.value]
    used = 1 if task == "reuse" else 0
    assert _uses(settings, entry_id) == (uses[0] + used, uses[1] + used)


def test_each_run_stores_its_final_latent_at_its_own_key_and_the_completing_run_s_is_served(
    task_settings: Settings,
    context_for: Callable[[Role], WorkerContext],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that stored its final latent and died before completing, then its redelivery: each wrote
    its own key (a run that lost its lease cannot overwrite the one served), and the job names the run
    that completed it."""
    context = context_for(Role.LARGE)
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT, route="miss")
    with monkeypatch.context() as patched:
        _die_at(patched, operation, "complete")
        with pytest.raises(WorkerDied):
            generate_job(context, job_id)
    generate_job(context, job_id)
    with session_scope(task_settings) as session:
        job = session.get_one(Job, job_id)
        served, attempts = job.final_latent_key, job.attempts
    assert attempts == 2 and served == keys.job_final_latent_key(job_id, 2)
    first = keys.job_final_latent_key(job_id, 1)
    assert first != served and context.blobs.get(first) and context.blobs.get(served)
