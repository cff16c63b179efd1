"""The exact-prompt fast path against the real database and the tiny models: a miss caches its entry
with the request's key, and an identical request (case and spacing aside) is a hit found by that key,
before and without any embedding; anything else still embeds."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import pytest

from core.settings import Settings
from core.vocabulary import AdmissionOutcome, Role, Route
from db.engine import session_scope
from db.models import Job
from tests.workers.conftest import make_job, make_tenant
from workers.admission import admit
from workers.context import WorkerContext
from workers.generation import generate_job

pytestmark = pytest.mark.integration

PROMPT = "a red circle left of a blue square"


class NeverEmbed:
    """A text embedder that fails the test if the fast path lets admission reach it."""

    dim = 384

    def embed_text(self, texts: Sequence[str]) -> object:
        raise AssertionError(f"embedded {list(texts)}: the identical request should not be embedded")


def _admission_ms(settings: Settings, job_id: uuid.UUID) -> dict[str, float]:
    with session_scope(settings) as session:
        return dict(session.get_one(Job, job_id).admission_ms)


def test_an_identical_request_is_a_hit_found_without_an_embedding(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext]
) -> None:
    tenant = make_tenant(task_settings)
    first = make_job(task_settings, tenant, PROMPT, route="miss", admission_outcome="searched_miss")
    generate_job(context_for(Role.LARGE), first)  # caches the entry with its prompt key
    admitting = context_for(Role.ADMIT)
    admitting._text_embedder = NeverEmbed()
    again = make_job(task_settings, tenant, "  A Red circle LEFT of a blue square ")
    decision = admit(admitting, again)
    assert decision is not None and decision.outcome is AdmissionOutcome.HIT and decision.route is Route.HIT
    assert decision.similarity == 1.0 and decision.k == 25  # nirvana-t2t: above 0.95 skips 25 of 50
    stages = _admission_ms(task_settings, again)
    assert "prompt" in stages and "embed" not in stages and "lookup" not in stages


def test_another_size_or_tenant_is_not_the_identical_request(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext]
) -> None:
    tenant = make_tenant(task_settings)
    first = make_job(task_settings, tenant, PROMPT, route="miss", admission_outcome="searched_miss")
    generate_job(context_for(Role.LARGE), first)
    admitting = context_for(Role.ADMIT)
    other_size = make_job(task_settings, tenant, PROMPT, width=128, height=128)
    other_tenant = make_job(task_settings, make_tenant(task_settings), PROMPT)
    for job_id in (other_size, other_tenant):
        decision = admit(admitting, job_id)
        assert decision is not None and decision.route is Route.MISS
        assert {"prompt", "embed", "lookup"} <= set(_admission_ms(task_settings, job_id))
