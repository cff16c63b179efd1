"""What a replayed request's job object says: the record of one request, its outcome for the report
(bench.run.outcomes), and the figures read across records (the measured full generation, DiffServe's
escalations and cost-aware hits). Latency: the client's wait to get the request accepted (429/503
retries included) plus the server's created_at -> completed_at, so polling does not blur it."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench.run.outcomes import RequestOutcome, Served
from bench.workload.trace import Request

TERMINAL = frozenset({"succeeded", "failed", "canceled"})


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What the replay saw of one request: run-clock times in seconds and the last job object."""

    request: Request
    intended_s: float
    post_started_s: float | None
    job: Mapping[str, Any] | None
    error: str | None = None
    fresh_quality: float | None = None  # an audited hit's request generated afresh: its judged quality


def parse_time(value: Any) -> datetime | None:
    """An API timestamp (ISO 8601, Z for UTC) as a datetime; None for anything else."""
    if not isinstance(value, str):
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def served_by(metrics: Mapping[str, Any], *, step_cache: bool) -> Served:
    """The stratum of a job's drop from its metrics: a hit, the cascade's light image kept, a miss run with
    the stack's step cache (`step_cache`: the stack ran one and the request did not turn caching off), or
    the full large model alone."""
    if metrics.get("route") == "hit":
        return Served.HIT
    stage = metrics.get("cascade")
    if stage is not None and not stage.get("escalated"):
        return Served.LIGHT
    return Served.STEP_CACHE if step_cache else Served.FULL


def outcome_from_record(record: JobRecord, *, step_cache: bool = False) -> RequestOutcome:
    """A RequestOutcome from a job object (see the module docstring for the latency); `step_cache`: the
    stack served the replay's cached requests with its step cache (bench.live.replay.ReplayOptions)."""
    request = record.request
    job = record.job
    if job is None:
        return RequestOutcome(
            seq=request.seq,
            prompt_idx=request.prompt_idx,
            status="rejected",
            hit=False,
            k=None,
            steps=0,
            arrival_s=record.intended_s,
        )
    metrics = job.get("metrics") or {}
    status = str(job.get("status"))
    hit = metrics.get("route") == "hit"
    created, completed = parse_time(job.get("created_at")), parse_time(job.get("completed_at"))
    latency_ms: float | None = None
    completed_s: float | None = None
    if status in TERMINAL and created is not None and completed is not None:
        waited = (record.post_started_s or record.intended_s) - record.intended_s
        latency_ms = (waited + (completed - created).total_seconds()) * 1000.0
        completed_s = record.intended_s + latency_ms / 1000.0
    return RequestOutcome(
        seq=request.seq,
        prompt_idx=request.prompt_idx,
        status=status if status in TERMINAL else "timeout",
        hit=hit,
        served=served_by(metrics, step_cache=step_cache and (job.get("input") or {}).get("cache") != "off"),
        k=int(metrics["k"]) if hit and metrics.get("k") is not None else None,
        similarity=float(metrics["similarity"]) if hit and metrics.get("similarity") is not None else None,
        steps=int((job.get("input") or {}).get("steps") or 0),
        denoiser_evaluations={str(m): int(n) for m, n in (metrics.get("denoiser_evaluations") or {}).items()},
        arrival_s=record.intended_s,
        completed_s=completed_s,
        latency_ms=latency_ms,
        admission_ms=_admission_total(metrics),
        admission_parts_ms={
            str(stage): float(ms)
            for stage, ms in (metrics.get("admission_ms") or {}).items()
            if stage != "total"
        },
    )


def _admission_total(metrics: dict[str, Any]) -> float | None:
    total = (metrics.get("admission_ms") or {}).get("total")
    return float(total) if total is not None else None


def measured_full_generation_ms(records: Sequence[JobRecord]) -> float | None:
    """Median run time of succeeded misses: the large model's full-generation latency as measured."""
    runs = [
        float(job["metrics"]["run_time_s"]) * 1000.0
        for job in (r.job for r in records)
        if job is not None
        and job.get("status") == "succeeded"
        and (job.get("metrics") or {}).get("route") == "miss"
        and (job.get("metrics") or {}).get("run_time_s") is not None
    ]
    return statistics.median(runs) if runs else None


def estimated_vanilla_rps(
    *, gpu_workers: int | None, full_generation_ms: float | None, offered_rps: float | None
) -> float | None:
    """What the same GPUs would serve with every request on the large model for all T steps:
    workers / full-generation latency, capped by the offered rate (an estimate, not a run)."""
    if not gpu_workers or not full_generation_ms:
        return None
    capacity = gpu_workers * 1000.0 / full_generation_ms
    return min(capacity, offered_rps) if offered_rps else capacity


def escalation_rate(records: Sequence[JobRecord]) -> float | None:
    """DiffServe's cascade: the share of the light stages the discriminator escalated to the heavy model,
    from each job's `metrics.cascade`; None when no job went through the cascade."""
    stages = [
        stage
        for job in (r.job for r in records)
        if job is not None and (stage := (job.get("metrics") or {}).get("cascade")) is not None
    ]
    return sum(bool(stage.get("escalated")) for stage in stages) / len(stages) if stages else None


def costlier_hits(records: Sequence[JobRecord]) -> int | None:
    """Cost-aware routing under the cascade: the jobs admission sent light-first although an entry was
    found (`metrics.admission` costlier_hit); None when no job went through the cascade."""
    metrics = [r.job.get("metrics") or {} for r in records if r.job is not None]
    cascaded = any(m.get("cascade") is not None for m in metrics)
    return sum(bool(m.get("admission") == "costlier_hit") for m in metrics) if cascaded else None


def stack_step_ms(records: Sequence[JobRecord]) -> dict[str, dict[str, float]]:
    """Per model, what a denoising step took on the stack under the replay's own load: the median, over
    the succeeded jobs that ran that model alone, of their run time (started to completed, the task's
    other work included) over their denoiser evaluations, with the jobs it is taken over. Beside the
    costs a simulation prices steps at (`bench runtime`, measured alone in one quiet process), it shows
    how much slower the stack's processes run while they share the host."""
    per_step: dict[str, list[float]] = {}
    for job in (r.job for r in records):
        if job is None or job.get("status") != "succeeded":
            continue
        metrics = job.get("metrics") or {}
        evaluations = metrics.get("denoiser_evaluations") or {}
        run_s = metrics.get("run_time_s")
        if len(evaluations) != 1 or run_s is None:
            continue
        ((model, steps),) = evaluations.items()
        if int(steps) > 0:
            per_step.setdefault(str(model), []).append(float(run_s) * 1000.0 / int(steps))
    return {
        model: {"step_ms": round(statistics.median(values), 2), "jobs": len(values)}
        for model, values in sorted(per_step.items())
    }
