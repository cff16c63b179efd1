"""The quality guard's audits against the real database and blob store (the tiny models): a completed
hit is queued for an audit at the configured share, and the audit generates the request afresh on the
large model, scores both images and records one row, storing nothing else."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import func, select

from core.scoring import JUDGE_SCALE, ScoreScale
from core.settings import Settings
from core.vocabulary import Role
from db.engine import session_scope
from db.models import CacheEntry, Job, QualityAudit
from jobs.queues import TaskName
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.audit import audit_hit
from workers.context import WorkerContext
from workers.generation import generate_job, reuse_job

pytestmark = pytest.mark.integration

PROMPT = "a small red circle left of a blue square"


class Brightness:
    """A scorer for the tiny models, which nothing judges: an image's mean brightness, 0..1."""

    name = "brightness"
    scale: ScoreScale = JUDGE_SCALE

    def reads(self, prompt: str) -> bool:
        return True

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> list[float | None]:
        return [float(np.asarray(image, dtype=np.float32).mean() / 255.0) for image in images]


def _settings(
    context_for: Callable[[Role], WorkerContext], **update: object
) -> Callable[[Role], WorkerContext]:
    def make(role: Role) -> WorkerContext:
        base = context_for(role)
        return WorkerContext(base.settings.model_copy(update=update), role, dispatcher=base.dispatcher)

    return make


def _hit(settings: Settings, contexts: Callable[[Role], WorkerContext]) -> uuid.UUID:
    tenant = make_tenant(settings)
    source = make_job(settings, tenant, PROMPT, route="miss", admission_outcome="searched_miss")
    generate_job(contexts(Role.LARGE), source)
    with session_scope(settings) as session:
        entry = session.scalars(select(CacheEntry.id).where(CacheEntry.source_job_id == source)).one()
    job_id = make_job(
        settings,
        tenant,
        PROMPT,
        route="hit",
        k=20,
        similarity=0.9,
        source_entry_id=entry,
        admission_outcome="hit",
    )
    reuse_job(contexts(Role.SMALL), job_id)
    return job_id


@pytest.mark.parametrize(("guard", "fraction", "audited"), [(True, 1.0, 1), (True, 0.0, 0), (False, 1.0, 0)])
def test_a_completed_hit_is_queued_for_an_audit_at_the_configured_share(
    task_settings: Settings,
    context_for: Callable[[Role], WorkerContext],
    dispatcher: RecordingDispatcher,
    guard: bool,
    fraction: float,
    audited: int,
) -> None:
    contexts = _settings(context_for, quality_guard=guard, quality_audit_fraction=fraction)
    job_id = _hit(task_settings, contexts)
    sent = dispatcher.of(TaskName.AUDIT_HIT)
    assert len(sent) == audited
    if audited:
        with session_scope(task_settings) as session:
            final_key = session.get_one(Job, job_id).final_latent_key
        assert sent[0].args == (str(job_id), None, final_key)  # the tiny models: no score at completion


def test_an_audit_generates_afresh_scores_both_and_records_one_row_storing_nothing_else(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    contexts = _settings(context_for, quality_guard=True, quality_audit_fraction=1.0)
    job_id = _hit(task_settings, contexts)
    [sent] = dispatcher.of(TaskName.AUDIT_HIT)
    large = contexts(Role.LARGE)
    large._scorer = Brightness()
    assert task_settings.blob_dir is not None
    blob_dir = Path(task_settings.blob_dir)
    blobs_before = sorted(path for path in blob_dir.rglob("*") if path.is_file())
    with session_scope(task_settings) as session:
        jobs_before = session.scalar(select(func.count()).select_from(Job))
    dispatcher.clear()

    assert audit_hit(large, uuid.UUID(sent.args[0]), sent.args[1], sent.args[2])
    with session_scope(task_settings) as session:
        [row] = session.scalars(select(QualityAudit).where(QualityAudit.job_id == job_id)).all()
        assert (row.similarity, row.k, row.steps, row.scorer) == (0.9, 20, task_settings.steps, "brightness")
        assert 0.0 <= row.hit_score <= 1.0 and 0.0 <= row.fresh_score <= 1.0
        assert row.drop == pytest.approx(row.fresh_score - row.hit_score)
        assert session.scalar(select(func.count()).select_from(Job)) == jobs_before  # no job row
    assert sorted(path for path in blob_dir.rglob("*") if path.is_file()) == blobs_before  # nothing stored
    assert dispatcher.sent == []  # no webhook, no other task

    # A job that is gone, or was not a hit, is not audited.
    assert not audit_hit(large, uuid.uuid4(), 0.5, sent.args[2])


def test_an_audit_queued_past_its_maximum_age_is_dropped_unrun(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], dispatcher: RecordingDispatcher
) -> None:
    contexts = _settings(
        context_for, quality_guard=True, quality_audit_fraction=1.0, quality_audit_max_age_s=60
    )
    job_id = _hit(task_settings, contexts)
    [sent] = dispatcher.of(TaskName.AUDIT_HIT)
    large = contexts(Role.LARGE)
    large._scorer = Brightness()
    with session_scope(task_settings) as session:  # the hit completed two minutes ago
        job = session.get(Job, job_id)
        assert job is not None and job.finished_at is not None
        job.finished_at = job.finished_at - timedelta(seconds=120)
    assert not audit_hit(large, uuid.UUID(sent.args[0]), sent.args[1], sent.args[2])
    with session_scope(task_settings) as session:
        assert (
            session.scalar(
                select(func.count()).select_from(QualityAudit).where(QualityAudit.job_id == job_id)
            )
            == 0
        )
