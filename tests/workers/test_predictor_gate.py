"""The match predictor's gate on the live admission path (NIRVANA 5.2): a request the predictor calls
a miss skips the vector search, one it calls a hit is searched. Against the real database, with a
predictor fitted by the retrain pass on the tenant's cached entries: inverting the gate (skipping the
search on a predicted hit, or searching a predicted miss) fails this test."""

from __future__ import annotations

import uuid

import pytest

from bench.workload.trace import DEFAULT_PROMPTS, load_prompts
from core.scopes import tenant_scope
from core.settings import Settings
from core.vocabulary import AdmissionOutcome, Role, Route
from db import cache
from db.engine import session_scope
from db.models import Job
from jobs.passes.retrain import retrain_scope
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.admission import admit
from workers.context import WorkerContext

pytestmark = pytest.mark.integration

CACHED = 64  # distinct prompts cached before the fit (with 24 the fit still calls everything a hit)
UNRELATED = "quarterly invoice ledger, a spreadsheet of accounts receivable and tax codes"


def _cache(settings: Settings, context: WorkerContext, scope: str, prompts: list[str]) -> None:
    embeddings = context.text_embedder().embed_text(prompts)
    with session_scope(settings) as session:
        for prompt, embedding in zip(prompts, embeddings, strict=True):
            entry_id = uuid.uuid4()
            states = [
                cache.NewState(k=k, blob_key=f"e/{entry_id}/{k}", bytes=100) for k in settings.capture_steps
            ]
            cache.insert_entry(
                session,
                entry_id=entry_id,
                scope=scope,
                model_family=settings.large_family,
                prompt=prompt,
                text_embedding=embedding,
                image_embedding=None,
                final_latent_key=f"e/{entry_id}/final",
                final_bytes=100,
                steps=settings.steps,
                source_job_id=None,
                size=(64, 64),
                states=states,
            )


def _stages(settings: Settings, job_id: uuid.UUID) -> set[str]:
    with session_scope(settings) as session:
        return set(session.get_one(Job, job_id).admission_ms or {})


def test_a_predicted_miss_skips_the_search_and_a_predicted_hit_is_searched(
    task_settings: Settings, dispatcher: RecordingDispatcher
) -> None:
    settings = task_settings.model_copy(update={"predictor_enabled": True, "predictor_audit_rate": 0.0})
    context = WorkerContext(settings, Role.ADMIT, dispatcher=dispatcher)
    tenant = make_tenant(settings)
    prompts = list(dict.fromkeys(line for line in load_prompts(DEFAULT_PROMPTS).lines if line.strip()))[
        :CACHED
    ]
    _cache(settings, context, tenant_scope(tenant), prompts)
    with session_scope(settings) as session:
        fitted = retrain_scope(
            session, settings, scope=tenant_scope(tenant), model_family=settings.large_family, force=True
        )
    assert fitted is not None

    near = make_job(settings, tenant, prompts[0] + ".")  # the predictor says hit: searched, and found
    decision = admit(context, near)
    assert decision is not None and decision.route is Route.HIT
    assert {"predict", "lookup"} <= _stages(settings, near)

    far = make_job(settings, tenant, UNRELATED)  # the predictor says miss: no search at all
    decision = admit(context, far)
    assert decision is not None and decision.outcome is AdmissionOutcome.PREDICTED_MISS
    stages = _stages(settings, far)
    assert "predict" in stages and "lookup" not in stages
