"""`reprise bench admission`: admissions per second per admit process, and what each stage costs.

On the configured database, without a broker: a bench tenant's cache is filled with the first `cached`
prompts of the trace (embedded by the configured text embedder, keyed by core.prompt_key as a miss would
leave them), then `jobs` job rows are made from the trace's next prompts, a share `repeats` of them
identical to a cached prompt, and each of `processes` processes (forked) admits its share through
workers.admission.admit, the admit task's body, with a dispatcher that sends nothing: one job at a time,
or on `threads` threads sharing the process's context, as an admit worker with REPRISE_ADMIT_THREADS
does (their prompts embedded together by one BatchingEmbedder, settings.embed_batch_*). Reported:
admissions per second (all processes, per process, and per core: per second of CPU time the admitting
processes used, the database's not counted), admission p50/p99 and per stage (prompt, embed, lookup,
total: the job rows' admission_ms), the mean batch of the embedder, the outcomes and the load average.
Everything the bench made is deleted afterwards.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from sqlalchemy import delete, select

from bench.workload.trace import DEFAULT_PROMPTS, load_prompts
from core.params import GenerationParams
from core.prompt_key import prompt_key
from core.scopes import tenant_scope
from core.settings import Settings
from core.vocabulary import Role
from db import cache
from db.engine import engine_for, session_scope
from db.models import Job, Tenant
from jobs.dispatch import DispatcherBase
from jobs.queues import TaskName
from workers.admission import admit
from workers.context import WorkerContext
from workers.kinds.image.admission import lookup_family
from workers.runtime.embedders.batching import BatchingEmbedder, BatchStats


class Discard(DispatcherBase):
    """Sends nothing: the bench measures admission, not the broker."""

    def _send(
        self,
        task: TaskName,
        args: Sequence[Any],
        countdown: float | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> None:
        pass


@dataclass(frozen=True, slots=True)
class AdmissionBenchOptions:
    jobs: int = 300
    processes: int = 1
    threads: int = 1  # admitting threads per process, sharing one batching embedder when more than 1
    batch_max: int | None = None  # settings.embed_batch_max unless given
    batch_wait_ms: float | None = None  # settings.embed_batch_wait_ms unless given
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
                session,
                entry_id=entry_id,
                scope=scope,
                model_family=family,
                prompt=prompt,
                text_embedding=embedding,
                image_embedding=None,
                final_latent_key=f"bench/{entry_id}",
                final_bytes=1,
                steps=settings.steps,
                size=(params.width, params.height),
                states=[cache.NewState(k, f"bench/{entry_id}/{k}", 1) for k in settings.capture_steps],
                prompt_key=prompt_key(params),
            )
        prompts = [
            cached[int(rng.integers(0, len(cached)))] if rng.random() < options.repeats else prompt
            for prompt in fresh
        ]
        jobs = []
        for prompt in prompts:
            params = _params(settings, prompt)
            job = Job(
                tenant_id=tenant.id,
                prompt=prompt,
                seed=0,
                steps=params.steps,
                width=params.width,
                height=params.height,
                guidance=params.guidance,
            )
            session.add(job)
            session.flush()
            jobs.append(job.id)
        return tenant.id, jobs


@dataclass(frozen=True, slots=True)
class _Share:
    """What one admitting process measured."""

    seconds: float
    cpu_seconds: float
    batches: BatchStats | None  # its batching embedder's calls and texts; None without one
    errors: list[str]


def admitting_settings(settings: Settings, options: AdmissionBenchOptions) -> Settings:
    """The settings an admit worker with `options.threads` threads would run under."""
    update: dict[str, Any] = {"admit_threads": options.threads}
    if options.batch_max is not None:
        update["embed_batch_max"] = options.batch_max
    if options.batch_wait_ms is not None:
        update["embed_batch_wait_ms"] = options.batch_wait_ms
    return settings.model_copy(update=update)


def _batch_stats(context: WorkerContext) -> BatchStats | None:
    embedder = context.query_embedder()
    return embedder.stats() if isinstance(embedder, BatchingEmbedder) else None


def _admit_share(settings: Settings, job_ids: list[uuid.UUID], threads: int, results: Any, go: Any) -> None:
    engine_for(settings.sqlalchemy_url).dispose(close=False)  # the parent's pooled connections stay its own
    context = WorkerContext(settings, Role.ADMIT, dispatcher=Discard())
    context.query_embedder().embed_text(["warm up"])  # the model is loaded before the clock starts
    before = _batch_stats(context)
    results.put(None)  # ready
    go.wait()  # every process starts admitting at once
    errors: list[str] = []

    def admit_all(share: list[uuid.UUID]) -> None:
        for job_id in share:
            try:
                admit(context, job_id)
            except Exception as error:  # reported; the job stays unadmitted
                errors.append(f"{job_id}: {error!r}")

    runners = [
        threading.Thread(target=admit_all, args=(job_ids[index::threads],)) for index in range(threads)
    ]
    started, cpu = time.perf_counter(), time.process_time()
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    after = _batch_stats(context)
    batches = None
    if before is not None and after is not None:
        batches = BatchStats(after.batches - before.batches, after.texts - before.texts)
    results.put(_Share(seconds, cpu_seconds, batches, errors))


def run_admission_bench(settings: Settings, options: AdmissionBenchOptions) -> dict[str, Any]:
    context = WorkerContext(settings, Role.ADMIT, dispatcher=Discard())
    tenant_id, job_ids = _prepare(settings, options, context)
    admitting = admitting_settings(settings, options)
    fork = multiprocessing.get_context("fork")
    results, go = fork.Queue(), fork.Event()
    shares = [job_ids[index :: options.processes] for index in range(options.processes)]
    workers = [
        fork.Process(target=_admit_share, args=(admitting, share, options.threads, results, go))
        for share in shares
    ]
    try:
        for worker in workers:
            worker.start()
        _collect(results, workers)  # every model is loaded
        load, started = os.getloadavg()[0], time.perf_counter()
        go.set()
        measured: list[_Share] = _collect(results, workers)
        wall = time.perf_counter() - started
        for worker in workers:
            worker.join()
        return _report(admitting, options, job_ids, measured, wall, (load, os.getloadavg()[0]))
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        with session_scope(settings) as session:
            session.execute(delete(Job).where(Job.tenant_id == tenant_id))
            cache.drop_scope(session, tenant_scope(tenant_id))
            session.execute(delete(Tenant).where(Tenant.id == tenant_id))


def _collect(results: Any, workers: list[Any]) -> list[Any]:
    """One message from each worker process; an error if one of them died instead."""
    received: list[Any] = []
    while len(received) < len(workers):
        try:
            received.append(results.get(timeout=1.0))
        except queue.Empty:
            dead = [worker.exitcode for worker in workers if worker.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"an admitting process died (exit codes {dead})") from None
    return received


def _report(
    settings: Settings,
    options: AdmissionBenchOptions,
    job_ids: list[uuid.UUID],
    shares: list[_Share],
    wall: float,
    load: tuple[float, float],
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
    per_share = len(job_ids) / options.processes
    batched = [share.batches for share in shares if share.batches is not None]
    embed_batch: dict[str, Any] | None = None
    if batched:
        batches = BatchStats(sum(b.batches for b in batched), sum(b.texts for b in batched))
        embed_batch = {
            "max": settings.embed_batch_max,
            "wait_ms": settings.embed_batch_wait_ms,
            "batches": batches.batches,
            "mean_size": round(batches.mean_size, 2),
        }
    return {
        "options": asdict(options),
        "embedder": settings.text_embedder.value,
        "embed_batch": embed_batch,
        "jobs": len(job_ids),
        "admitted": sum(outcome is not None for outcome, _ in rows),
        "errors": [error for share in shares for error in share.errors][:10],
        "admissions_per_s": round(len(job_ids) / wall, 1),
        "admissions_per_s_per_process": round(statistics.fmean(per_share / s.seconds for s in shares), 1),
        "admissions_per_s_per_core": round(len(job_ids) / sum(s.cpu_seconds for s in shares), 1),
        "cores": os.cpu_count(),
        "load_average_1m": {"before": round(load[0], 2), "after": round(load[1], 2)},
        "admission_ms": {"p50": _q(totals, 50), "p99": _q(totals, 99)},
        "stages": {
            stage: {"p50": _q(v, 50), "p99": _q(v, 99), "n": len(v)} for stage, v in sorted(stages.items())
        },
        "outcomes": dict(Counter(outcome for outcome, _ in rows)),
    }


def _q(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)
