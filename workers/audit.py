"""Quality audits (the quality guard, jobs/policies/quality_guard.py): a share of completed hits is
generated again from scratch and both images are scored, so the guard knows what a hit at its
similarity and k costs in quality.

After a hit completes, with probability Settings.quality_audit_fraction, the hit is queued for an
audit on the quality_audit queue, which only large workers take, and take first (jobs.queues,
workers.role_switch.consumed_queues): the fraction bounds the audits' share of the large pool (about 3%
more full generations at a hit rate of 0.3 and the default 0.1), and under load they still run, as a
guard must measure the load it guards; on a worker that batches, an audit is one more member of its
batch (workers.runtime.batch_loop). Taken last, on idle capacity only, they starved under load; taken
first, an audit still queued REPRISE_QUALITY_AUDIT_MAX_AGE_S after its hit is dropped unrun, so that
audits never pile up ahead of the misses.
The large pool because the fresh image must be what a miss would have served (the large model, all T
steps, MoDM 5.1 / NIRVANA 4.1); the io pool, which runs the maintenance queue, holds no model.

The fresh generation is the hit's request again (the same prompt, seed, steps, size and guidance,
Algorithm 1's fresh image I_0) with nothing captured and nothing stored: no job row, no cache entry, no
blob, no webhook; its only trace is the audit row, scored by the configured scorer
(WorkerContext.scorer: the lab judge on the lab's models, CLIP score on real ones).
"""

from __future__ import annotations

import logging
import random
import uuid
from datetime import timedelta

from PIL import Image

from core.params import GenerationParams, job_params
from core.vocabulary import JobKind
from db import quality_guard as guard_db
from db.codec.latent import decode_latent
from db.engine import session_scope
from db.job_runs import utcnow
from db.models import Job
from workers.context import WorkerContext
from workers.job import JobView
from workers.runtime.step_cache import full_calls_only

log = logging.getLogger(__name__)


def maybe_audit(context: WorkerContext, job: JobView, hit_score: float | None, final_key: str) -> bool:
    """After a hit completed: queue its audit with probability quality_audit_fraction (guard on)."""
    settings = context.settings
    if not settings.quality_guard or job.source_entry_id is None or job.kind != JobKind.IMAGE.value:
        return False
    if random.random() >= settings.quality_audit_fraction:
        return False
    context.dispatcher.audit_hit(job.id, hit_score, final_key)
    return True


def audit_hit(context: WorkerContext, job_id: uuid.UUID, hit_score: float | None, final_key: str) -> bool:
    """Generate the hit's request afresh, score both images and record the audit; False (nothing
    recorded) when the job is gone, was not a hit, or the scorer has no score for its prompt."""
    settings = context.settings
    with session_scope(settings) as session:
        row = session.get(Job, job_id)
        if row is None or row.similarity is None or row.k is None or row.kind != JobKind.IMAGE.value:
            return False
        if row.finished_at is not None and utcnow() - row.finished_at > timedelta(
            seconds=settings.quality_audit_max_age_s
        ):
            log.info("audit of hit %s dropped: queued past %.0f s", job_id, settings.quality_audit_max_age_s)
            return False
        params, similarity, k = job_params(row), float(row.similarity), int(row.k)
    scorer = context.scorer()
    if scorer is None or not isinstance(params, GenerationParams) or not scorer.reads(params.prompt):
        return False
    runtime = context.runtime()
    if hit_score is None:  # a hit stores its latent alone (LatentBox 4.1): its image is decoded here
        source = decode_latent(context.blobs.get(final_key))
        hit_score = scorer.score([runtime.decode(source.array, family=source.family).image], [params.prompt])[
            0
        ]
    with full_calls_only():  # the fresh image is the full model's alone, every cache off (the step cache too)
        fresh = runtime.generate(params, decode=True)
    image: Image.Image = fresh.image or runtime.decode(fresh.final_latent, family=fresh.family).image
    fresh_score = scorer.score([image], [params.prompt])[0]
    if hit_score is None or fresh_score is None:
        return False
    with session_scope(settings) as session:
        guard_db.record_audit(
            session,
            job_id=job_id,
            similarity=similarity,
            k=k,
            steps=params.steps,
            hit_score=hit_score,
            fresh_score=fresh_score,
            scorer=scorer.name,
        )
    log.info(
        "audited hit %s: similarity %.3f k %d, hit %.3f fresh %.3f",
        job_id,
        similarity,
        k,
        hit_score,
        fresh_score,
    )
    return True
