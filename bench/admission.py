"""`reprise bench admission`: admissions per second per admit process, and what each stage costs.

On the configured database, without a broker: a bench tenant's cache is filled with the first `cached`
prompts of the trace (embedded by the configured text embedder, keyed by core.prompt_key as a miss would
leave them), then `jobs` job rows are made from the trace's next prompts, a share `repeats` of them
identical to a cached prompt, and each of `processes` processes (forked, one core each) admits its
share one job at a time through workers.admission.admit, the admit task's body, with a dispatcher that
sends nothing. Reported: admissions per second (all processes, and per process), admission p50/p99 and
per stage (prompt, embed, lookup, total: the job rows' admission_ms), and the outcomes. Everything the
bench made is deleted afterwards.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import delete, select

from bench.trace import DEFAULT_PROMPTS, load_prompts
from core.params import GenerationParams
from core.prompt_key import prompt_key
from core.scopes import tenant_scope
from core.settings import Settings
from core.vocabulary import Role
from db import cache
from db.engine import session_scope
from db.models import Job, Tenant
from jobs.dispatch import DispatcherBase
from jobs.queues import TaskName
from workers.admission import admit, lookup_family
from workers.context import WorkerContext


class Discard(DispatcherBase):
    """Sends nothing: the bench measures admission, not the broker."""

    def _send(
        self, task: TaskName, args: Sequence[Any], countdown: float | None = None, queue: str | None = None
    ) -> None:
        pass


@dataclass(frozen=True, slots=True)
class AdmissionBenchOptions:
    jobs: int = 300
    processes: int = 1
    cached: int = 500
    repeats: float = 0.2  # share of the jobs identical to a cached prompt (the fast path's case)
    seed: int = 0


def _params(settings: Settings, prompt: str) -> GenerationParams:
    size = settings.effective_default_size
    return GenerationParams(prompt=prompt, steps=settings.steps, width=size, height=size)


def _prepare(
    settings: Settings, options: AdmissionBenchOptions, context: WorkerContext
) -> tuple[uuid.UUID, list[uuid.UUID]]:
    lines = [line for line in load_prompts(DEFAULT_PROMPTS).lines if line.strip()]
    cached, fresh = lines[: options.cached], lines[options.cached : options.cached + options.jobs]
    rng = np.random.default_rng(options.seed)
    embeddings = context.text_embedder().embed_text(cached)
    family = lookup_family(settings) or settings.large_family or "bench"
    with session_scope(settings) as session:
        tenant = Tenant(name=f"bench-admission-{uuid.uuid4().hex[:8]}", webhook_secret="whsec_YmVuY2g=")
        session.add(tenant)
        session.flush()
        scope = tenant_scope(tenant.id)
        for prompt, embedding in zip(cached, embeddings, strict=True):
            params = _params(settings, prompt)
            entry_id = uuid.uuid4()
            cache.insert_entry(
                session, entry_id=entry_id, scope=scope, model_family=family, prompt=prompt,
                text_embedding=embedding, image_embedding=None, final_latent_key=f"bench/{entry_id}",
                final_bytes=1, steps=settings.steps, size=(params.width, params.height),
                states=[cache.NewState(k, f"bench/{entry_id}/{k}", 1) for k in settings.capture_steps],
                prompt_key=prompt_key(params),
            )  # fmt: skip
        prompts = [
            cached[int(rng.integers(0, len(cached)))] if rng.random() < options.repeats else prompt
            for prompt in fresh
        ]
        jobs = []
        for prompt in prompts:
            params = _params(settings, prompt)
            job = Job(tenant_id=tenant.id, prompt=prompt, seed=0, steps=params.steps, width=params.width,
                      height=params.height, guidance=params.guidance)  # fmt: skip
            session.add(job)
            session.flush()
            jobs.append(job.id)
        return tenant.id, jobs


def _admit_share(settings: Settings, job_ids: list[uuid.UUID], results: Any) -> None:
    context = WorkerContext(settings, Role.ADMIT, dispatcher=Discard())
    context.text_embedder().embed_text(["warm up"])  # the model is loaded before the clock starts
    started = time.perf_counter()
    for job_id in job_ids:
        admit(context, job_id)
    results.put(time.perf_counter() - started)


def run_admission_bench(settings: Settings, options: AdmissionBenchOptions) -> dict[str, Any]:
    context = WorkerContext(settings, Role.ADMIT, dispatcher=Discard())
    tenant_id, job_ids = _prepare(settings, options, context)
    try:
        shares = [job_ids[index :: options.processes] for index in range(options.processes)]
        fork = multiprocessing.get_context("fork")
        results = fork.Queue()
        started = time.perf_counter()
        workers = [fork.Process(target=_admit_share, args=(settings, share, results)) for share in shares]
        for worker in workers:
            worker.start()
        spans = [results.get(timeout=3600) for _ in workers]
        for worker in workers:
            worker.join()
        wall = time.perf_counter() - started
        return _report(settings, options, job_ids, spans, wall)
    finally:
        with session_scope(settings) as session:
            session.execute(delete(Job).where(Job.tenant_id == tenant_id))
            cache.drop_scope(session, tenant_scope(tenant_id))
            session.execute(delete(Tenant).where(Tenant.id == tenant_id))


def _report(
    settings: Settings,
    options: AdmissionBenchOptions,
    job_ids: list[uuid.UUID],
    spans: list[float],
    wall: float,
) -> dict[str, Any]:
    with session_scope(settings) as session:
        rows = session.execute(
            select(Job.admission_outcome, Job.admission_ms).where(Job.id.in_(job_ids))
        ).all()
    stages: dict[str, list[float]] = {}
    for _, timings in rows:
        for stage, ms in (timings or {}).items():
            stages.setdefault(stage, []).append(float(ms))
    totals = stages.get("total", [0.0])
    return {
        "options": options.__dict__,
        "embedder": settings.text_embedder.value,
        "jobs": len(job_ids),
        "admissions_per_s": round(len(job_ids) / wall, 1),
        "admissions_per_s_per_process": round(
            statistics.fmean(len(job_ids) / options.processes / s for s in spans), 1
        ),
        "admission_ms": {"p50": _q(totals, 50), "p99": _q(totals, 99)},
        "stages": {
            stage: {"p50": _q(v, 50), "p99": _q(v, 99), "n": len(v)} for stage, v in sorted(stages.items())
        },
        "outcomes": dict(Counter(outcome for outcome, _ in rows)),
    }


def _q(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)
