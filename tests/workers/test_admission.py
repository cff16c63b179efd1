"""The admit task body against the real database: it decides, records once, and routes through the
dispatcher (recorded, so the decision is read off what would have gone on the broker)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import delete

from core import logs
from core.scopes import tenant_scope
from core.settings import Settings
from core.vocabulary import LAB_ATTRIBUTES, AdmissionOutcome, Allocator, JobStatus, LookupMode, Role, Route
from db import cache
from db import cascade as cascade_db
from db.engine import session_scope
from db.job_runs import utcnow
from db.models import CascadeDecision, Job
from jobs.policies.k_selection import choose_k, table_for
from jobs.queues import TaskName
from lab.captions import caption
from lab.world import near_miss, render, sample_scene
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.admission import admit
from workers.context import WorkerContext

pytestmark = pytest.mark.integration

PROMPT = "a lighthouse on a cliff at dusk, oil painting"


def _cache_entry(
    settings: Settings,
    context: WorkerContext,
    scope: str,
    prompt: str,
    *,
    image: cache.Embedding | None = None,
) -> uuid.UUID:
    """An entry for `prompt` (and its image's embedding, for image lookups) holding states at every
    captured k, as a miss would leave it."""
    embedding = context.text_embedder().embed_text([prompt])[0]
    entry_id = uuid.uuid4()
    ks = settings.capture_steps
    with session_scope(settings) as session:
        cache.insert_entry(
            session,
            entry_id=entry_id,
            scope=scope,
            model_family=settings.large_family,
            prompt=prompt,
            text_embedding=embedding,
            image_embedding=image,
            final_latent_key=f"e/{entry_id}/final",
            final_bytes=100,
            steps=settings.steps,
            source_job_id=None,
            size=(64, 64),
            states=[cache.NewState(k=k, blob_key=f"e/{entry_id}/{k}", bytes=100) for k in ks],
        )
    return entry_id


def _job(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


def test_a_job_with_nothing_cached_is_a_searched_miss_sent_to_the_large_pool(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    decision = admit(context_for(Role.ADMIT), job_id)
    assert decision is not None and decision.outcome is AdmissionOutcome.SEARCHED_MISS
    assert dispatcher.of(TaskName.GENERATE)[0].args == (str(job_id),)
    assert dispatcher.of(TaskName.REUSE) == []
    job = _job(task_settings, job_id)
    assert (job.route, job.k, job.admission_outcome) == ("miss", None, "searched_miss")
    assert set(job.admission_ms) >= {"embed", "lookup", "total"}


def test_the_jobs_log_fields_leave_with_the_call(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    """An admit pool's thread (or any caller) keeps its own log context: the job's id and tenant are
    bound for the call only."""
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    with logs.bound(role="admit"):
        before = dict(logs.context())  # a GPU run earlier in this thread may have bound a job of its own
        assert admit(context_for(Role.ADMIT), job_id) is not None
        assert logs.context() == before and before["role"] == "admit"
        assert before.get("job_id") != str(job_id)


def test_a_paraphrase_of_a_cached_prompt_is_a_hit_with_the_tables_k(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    context = context_for(Role.ADMIT)
    tenant = make_tenant(task_settings)
    entry = _cache_entry(task_settings, context, tenant_scope(tenant), PROMPT)
    job_id = make_job(task_settings, tenant, PROMPT + ".")
    decision = admit(context, job_id)
    assert decision is not None and decision.route is Route.HIT
    assert (
        decision.source_entry_id == entry and decision.similarity is not None and decision.similarity > 0.95
    )
    assert decision.k == 25  # nirvana-t2t: above 0.95 skips 25 of 50
    assert [sent.args for sent in dispatcher.of(TaskName.REUSE)] == [(str(job_id),)]
    assert _job(task_settings, job_id).source_entry_id == entry


def test_another_tenants_entry_is_never_a_hit(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    context = context_for(Role.ADMIT)
    _cache_entry(task_settings, context, tenant_scope(make_tenant(task_settings)), PROMPT)
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    decision = admit(context, job_id)
    assert decision is not None and decision.route is Route.MISS
    assert dispatcher.of(TaskName.REUSE) == []


def test_cache_off_skips_the_search(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT, cache_mode="off")
    decision = admit(context_for(Role.ADMIT), job_id)
    assert decision is not None and decision.outcome is AdmissionOutcome.CACHE_OFF
    assert set(_job(task_settings, job_id).admission_ms) == {"total"}
    assert len(dispatcher.of(TaskName.GENERATE)) == 1


def test_a_redelivered_admission_routes_again_but_decides_and_counts_once(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    context = context_for(Role.ADMIT)
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT)
    first = admit(context, job_id)
    admitted_at = _job(task_settings, job_id).admitted_at
    again = admit(context, job_id)  # the message came back (worker lost before the ack)
    assert first is not None and again is None
    assert _job(task_settings, job_id).admitted_at == admitted_at
    assert [sent.task for sent in dispatcher.sent] == [TaskName.GENERATE, TaskName.GENERATE]


def test_a_job_that_ended_meanwhile_is_left_alone(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    job_id = make_job(task_settings, make_tenant(task_settings), PROMPT, status=JobStatus.CANCELED.value)
    assert admit(context_for(Role.ADMIT), job_id) is None
    assert dispatcher.sent == []
    assert _job(task_settings, job_id).route is None


def test_image_lookups_on_the_lab_find_the_cached_image_that_shows_the_prompt(
    task_settings: Settings, dispatcher: RecordingDispatcher
) -> None:
    """MoDM's text-to-image lookup in the lab's attribute space (the default on the lab's models): of two
    cached images, one of the scene asked for and one of a near miss, the prompt finds its own scene's,
    with the k lab-t2i gives its similarity; the near miss's own caption finds the other."""
    settings = task_settings.model_copy(
        update={
            "lookup_mode": LookupMode.TEXT_TO_IMAGE,
            "open_clip_model": LAB_ATTRIBUTES,
            "k_table": "lab-t2i",
        }
    )
    context = WorkerContext(settings, Role.ADMIT, dispatcher=dispatcher)
    space = context.image_embedder()
    rng = np.random.default_rng(21)
    scene = sample_scene(rng)
    miss = near_miss(scene, rng)
    tenant = make_tenant(settings)
    entries = {}
    for shown in (scene, miss):
        image = Image.fromarray(render(shown, rng))
        entries[shown] = _cache_entry(
            settings, context, tenant_scope(tenant), caption(shown, rng), image=space.embed_image([image])[0]
        )
    for shown in (scene, miss):
        job_id = make_job(settings, tenant, caption(shown, rng))
        decision = admit(context, job_id)
        assert decision is not None and decision.route is Route.HIT and decision.similarity is not None
        assert decision.source_entry_id == entries[shown]
        table = table_for("lab-t2i", LookupMode.TEXT_TO_IMAGE)
        assert decision.k == choose_k(decision.similarity, table, settings.capture_steps)


def _cascade_decision(settings: Settings, escalated: float) -> int:
    """A decision of DiffServe's allocator as jobs.pools.diffserve records one: DiffServe 4.1's SD 1.5
    (35.6 ms a step) with SD-Turbo's light stage (110 ms), f(t) = `escalated`."""
    inputs = {"small_step_ms": 35.6, "large_step_ms": 35.6, "light_latency_s": 0.11, "heavy_latency_s": 1.78}
    with session_scope(settings) as session:
        row = cascade_db.add_decision(
            session,
            CascadeDecision(
                period_start=utcnow(),
                period_seconds=60,
                inputs=inputs,
                solution={"escalated": escalated},
                threshold=0.4,
                feasible=True,
                objective=1.0,
                solve_ms=1.0,
                target_light=1,
                target_heavy=1,
                applied_light=1,
                applied_heavy=1,
                switches=[],
            ),
        )
        session.flush()
        return row.id


@pytest.mark.parametrize(("escalated", "route"), [(0.3, Route.MISS), (0.9, Route.HIT)])
def test_under_the_cascade_a_hit_costlier_than_a_light_stage_goes_light_first(
    task_settings: Settings, dispatcher: RecordingDispatcher, escalated: float, route: Route
) -> None:
    """Cost-aware routing on the live path: a paraphrase found at k = 25 costs 25 steps (0.89 s); the
    miss route a light stage and f(t) of a heavy run, 0.644 s at f = 0.3 (light-first, recorded as a
    costlier hit) and 1.71 s at f = 0.9 (the hit stands)."""
    settings = task_settings.model_copy(update={"allocator": Allocator.DIFFSERVE})
    context = WorkerContext(settings, Role.ADMIT, dispatcher=dispatcher)
    tenant = make_tenant(settings)
    _cache_entry(settings, context, tenant_scope(tenant), PROMPT)
    decision_id = _cascade_decision(settings, escalated)
    try:
        job_id = make_job(settings, tenant, PROMPT + ".")
        decision = admit(context, job_id)
    finally:
        with session_scope(settings) as session:
            session.execute(delete(CascadeDecision).where(CascadeDecision.id == decision_id))
    assert decision is not None and decision.route is route
    job = _job(settings, job_id)
    if route is Route.MISS:
        assert (job.route, job.k, job.admission_outcome) == ("miss", None, "costlier_hit")
        assert [sent.args for sent in dispatcher.of(TaskName.GENERATE_LIGHT)] == [(str(job_id),)]
        assert dispatcher.of(TaskName.REUSE) == []
    else:
        assert (job.route, job.k, job.admission_outcome) == ("hit", 25, "hit")
        assert [sent.args for sent in dispatcher.of(TaskName.REUSE)] == [(str(job_id),)]


def test_the_modm_allocator_never_prices_a_hit(
    task_settings: Settings, dispatcher: RecordingDispatcher
) -> None:
    """Under MoDM's monitor (no cascade) a hit and a miss run on different pools: the hit stands even
    when a decision of the cascade's allocator is on record."""
    context = WorkerContext(task_settings, Role.ADMIT, dispatcher=dispatcher)
    tenant = make_tenant(task_settings)
    _cache_entry(task_settings, context, tenant_scope(tenant), PROMPT)
    decision_id = _cascade_decision(task_settings, 0.0)
    try:
        decision = admit(context, make_job(task_settings, tenant, PROMPT + "."))
    finally:
        with session_scope(task_settings) as session:
            session.execute(delete(CascadeDecision).where(CascadeDecision.id == decision_id))
    assert decision is not None and decision.route is Route.HIT
