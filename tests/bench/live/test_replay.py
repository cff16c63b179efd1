"""The replay's metrics, computed from job objects exactly as GET /v1/generations/{id} serves them."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.live.demo import demo_summary
from bench.live.records import (
    JobRecord,
    escalation_rate,
    estimated_vanilla_rps,
    outcome_from_record,
    stack_step_ms,
)
from bench.live.replay import replay_report
from bench.run.costs import StepCosts
from bench.run.outcomes import RequestOutcome, step_ms_by_model
from bench.run.profiles import build_profile
from bench.workload.trace import ArrivalSpec, Request, build_workload, load_prompts
from core.errors import UnknownModel
from core.settings import load_settings
from core.vocabulary import JobStatus
from jobs.representation import Generation, GenerationInput, GenerationMetrics, generation_urls

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
COSTS = StepCosts(large_step_ms=100.0, small_step_ms=25.0, decode_ms=10.0)


def job_json(
    *,
    route: str | None,
    k: int | None,
    evals: dict[str, int],
    created_s: float,
    run_s: float,
    status: JobStatus = JobStatus.SUCCEEDED,
    steps: int = 50,
) -> dict[str, Any]:
    """A job object built with the service's own serializer (jobs.representation)."""
    job_id = uuid.uuid4()
    created = T0 + timedelta(seconds=created_s)
    started = created + timedelta(seconds=0.5)
    finished = started + timedelta(seconds=run_s)
    generation = Generation(
        id=job_id,
        status=status,
        input=GenerationInput(
            prompt="p",
            negative_prompt=None,
            seed=1,
            steps=steps,
            width=512,
            height=512,
            guidance=7.5,
            cache="auto",
            webhook=None,
            webhook_events_filter=[],
            decode="lazy",
        ),
        output=None,
        error=None,
        metrics=GenerationMetrics(
            route=route,  # type: ignore[arg-type]
            admission=None,
            similarity=0.97 if route == "hit" else None,
            k=k,
            source_entry=uuid.uuid4() if route == "hit" else None,
            models=list(evals),
            denoiser_evaluations=evals,
            admission_ms={"embed": 2.0, "lookup": 3.0, "total": 5.5} if route is not None else {},
            queue_time_s=0.5,
            run_time_s=run_s,
            vae_decodes=0,
            quality=None,
        ),
        created_at=created,
        started_at=started,
        completed_at=finished if status in (JobStatus.SUCCEEDED, JobStatus.FAILED) else None,
        urls=generation_urls(job_id, base_url=""),
    )
    return generation.model_dump(mode="json", by_alias=True)


def record(
    seq: int, job: dict[str, Any] | None, *, intended_s: float = 0.0, waited_s: float = 0.0
) -> JobRecord:
    request = Request(seq=seq, prompt_idx=seq, prompt=f"p{seq}", arrival_s=intended_s)
    return JobRecord(request, intended_s, intended_s + waited_s, job)


def test_outcome_latency_is_the_clients_wait_plus_the_servers_time() -> None:
    job = job_json(route="miss", k=None, evals={"big": 50}, created_s=0.0, run_s=5.0)
    outcome = outcome_from_record(record(0, job, intended_s=10.0, waited_s=2.0))
    assert outcome.status == "succeeded" and not outcome.hit and outcome.steps == 50
    assert outcome.latency_ms == pytest.approx(2000.0 + 500.0 + 5000.0)
    assert outcome.completed_s == pytest.approx(10.0 + 7.5)
    assert outcome.admission_ms == 5.5 and outcome.admission_parts_ms == {"embed": 2.0, "lookup": 3.0}


def test_outcome_of_a_rejected_or_unfinished_request() -> None:
    assert outcome_from_record(record(0, None)).status == "rejected"
    queued = job_json(route=None, k=None, evals={}, created_s=0, run_s=1, status=JobStatus.PROCESSING)
    outcome = outcome_from_record(record(1, queued))
    assert outcome.status == "timeout" and outcome.latency_ms is None and not outcome.succeeded


def _records() -> list[JobRecord]:
    jobs = [
        job_json(route="miss", k=None, evals={"big": 50}, created_s=0, run_s=5.0),
        job_json(route="miss", k=None, evals={"big": 50}, created_s=1, run_s=5.0),
        job_json(route="hit", k=25, evals={"little": 25}, created_s=2, run_s=1.0),
        job_json(route="hit", k=10, evals={"little": 40}, created_s=3, run_s=1.5),
        job_json(
            route="hit", k=25, evals={"big": 25}, created_s=4, run_s=2.5
        ),  # a hit on an idle large worker
        job_json(route="miss", k=None, evals={"big": 50}, created_s=5, run_s=30.0),  # slow: past 4x
        job_json(route="miss", k=None, evals={}, created_s=6, run_s=0.1, status=JobStatus.FAILED),
    ]
    return [record(i, job, intended_s=float(i)) for i, job in enumerate(jobs)]


def test_the_stacks_step_under_load_is_each_models_median_run_time_a_step() -> None:
    mixed = job_json(route="hit", k=25, evals={"little": 5, "big": 20}, created_s=7, run_s=9.0)
    steps = stack_step_ms([*_records(), record(7, mixed)])
    # big: 5 s / 50 twice, 2.5 s / 25, 30 s / 50; little: 1 s / 25, 1.5 s / 40 (the failed job and the
    # two-model one left out)
    assert steps == {"big": {"step_ms": 100.0, "jobs": 4}, "little": {"step_ms": 38.75, "jobs": 2}}
    assert stack_step_ms([record(0, None)]) == {}


def test_replay_report_aggregates_hits_k_and_weighted_compute(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    prompts_file = tmp_path / "p.txt"
    prompts_file.write_text("\n".join(f"p{i}" for i in range(7)) + "\n", encoding="utf-8")
    workload = build_workload(load_prompts(prompts_file), ArrivalSpec())
    report = replay_report(
        _records(),
        profile=build_profile("modm", settings),
        workload=workload,
        costs=COSTS,
        costs_measured=True,
        embedder={"name": "minilm"},
        gpu_workers=2,
        png_bytes=1234.0,
    )
    assert report.requests == 7
    assert report.hit_rate == pytest.approx(3 / 6)  # over the 6 that succeeded
    assert dict(report.k_histogram) == {10: 1, 25: 2}
    # Names come from the jobs: "big" ran the misses, so it is the large model; "little" is the small one.
    spent = 3 * 50 * 100.0 + 25 * 25.0 + 40 * 25.0 + 25 * 100.0
    assert report.compute_saved == pytest.approx(1 - spent / (6 * 50 * 100.0))
    # SLO base from the measured costs: 50 x 100 ms + 10 ms; only the 30.5 s job passes 4x (20.04 s).
    assert report.slo_violations.x4 == pytest.approx(1 / 6)
    assert report.slo_violations.x2 == pytest.approx(1 / 6)
    assert report.latency_ms.p50 is not None and report.latency_ms.p50 > 1000.0
    assert report.png_bytes == 1234.0
    assert report.vanilla_throughput_rps == pytest.approx(2 * 1000.0 / 5000.0)  # 2 GPUs / median miss run
    # Admission overhead from the jobs' metrics: the total and each stage apart.
    assert report.admission_ms.p50 == pytest.approx(5.5)
    assert dict(report.admission_ms.stages) == {"embed": (2.0, 2.0), "lookup": (3.0, 3.0)}


def test_a_cascade_replay_reports_the_share_of_light_stages_escalated(tmp_path: Path) -> None:
    """Each job's metrics.cascade says whether the discriminator escalated it: 2 of the 3 light stages;
    a hit never went through the cascade and counts in neither."""
    jobs = _records()
    for i, escalated in ((0, True), (1, False), (5, True)):
        job = dict(jobs[i].job or {})
        job["metrics"] = {
            **job["metrics"],
            "cascade": {
                "light_model": "lab:large",
                "discriminator_score": 0.01,
                "threshold": 0.02,
                "escalated": escalated,
                "discriminator_version": 1,
                "light_ms": 600.0,
            },
        }
        jobs[i] = replace(jobs[i], job=job)
    assert escalation_rate(jobs) == pytest.approx(2 / 3)
    assert escalation_rate(_records()) is None  # no cascade: null, as outside DiffServe
    prompts_file = tmp_path / "p.txt"
    prompts_file.write_text("\n".join(f"p{i}" for i in range(7)) + "\n", encoding="utf-8")
    report = replay_report(
        jobs,
        profile=build_profile("modm", load_settings(data_dir=tmp_path)),
        workload=build_workload(load_prompts(prompts_file), ArrivalSpec()),
        costs=COSTS,
        costs_measured=True,
        embedder={"name": "minilm"},
        gpu_workers=2,
        png_bytes=None,
    )
    assert report.as_json()["escalation_rate"] == pytest.approx(0.6667)


def test_vanilla_replay_is_its_own_baseline(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    prompts_file = tmp_path / "p.txt"
    prompts_file.write_text("p0\np1\n", encoding="utf-8")
    jobs = [job_json(route="miss", k=None, evals={"big": 50}, created_s=i, run_s=5.0) for i in range(2)]
    report = replay_report(
        [record(i, job, intended_s=float(i)) for i, job in enumerate(jobs)],
        profile=build_profile("vanilla", settings),
        workload=build_workload(load_prompts(prompts_file), ArrivalSpec()),
        costs=COSTS,
        costs_measured=False,
        embedder={},
        gpu_workers=None,
        png_bytes=None,
    )
    assert report.hit_rate == 0.0 and report.compute_saved == 0.0 and dict(report.k_histogram) == {}
    assert report.vanilla_throughput_rps == report.throughput_rps


def test_estimated_vanilla_is_capped_by_the_offered_rate() -> None:
    assert estimated_vanilla_rps(gpu_workers=4, full_generation_ms=2000.0, offered_rps=None) == 2.0
    assert estimated_vanilla_rps(gpu_workers=4, full_generation_ms=2000.0, offered_rps=0.5) == 0.5
    assert estimated_vanilla_rps(gpu_workers=None, full_generation_ms=2000.0, offered_rps=None) is None


def test_three_models_cannot_be_priced() -> None:
    outcomes = [
        RequestOutcome(
            seq=i,
            prompt_idx=i,
            status="succeeded",
            hit=i > 0,
            k=None,
            steps=50,
            denoiser_evaluations={name: 10},
        )
        for i, name in enumerate(["a", "b", "c"])
    ]
    with pytest.raises(UnknownModel, match="b, c"):
        step_ms_by_model(COSTS, outcomes)


def test_demo_summary_reports_hits_k_steps_and_latency() -> None:
    outcomes = [outcome_from_record(r) for r in _records()]
    text = demo_summary(outcomes)
    assert "6 of 7 requests succeeded, 1 did not" in text
    assert "hits 3  misses 3" in text
    assert "k=10:1 k=25:2" in text
    assert "steps saved  60 (20.0% of 300)" in text
    assert "p50" in text and "p95" in text
