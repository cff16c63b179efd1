"""DiffServe's cascade in the simulator: which requests escalate, their quality and models, and the
controller (a fixed threshold provisioned for the peak, or the MILP every period)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.run.profiles import build_profile
from bench.sim.cascade import PAIRS, CascadeProfile, CascadeSpec
from bench.sim.config import SimConfig, SimResult
from bench.sim.simulate import run_simulation
from bench.workload.embeddings import TraceEmbeddings
from bench.workload.trace import ArrivalKind, ArrivalSpec, Prompts, build_workload
from core.settings import Settings
from core.vocabulary import Allocator
from jobs.policies.cascade import EscalationCurve

PAIR = PAIRS["sd15"]
SCORES = [0.05 + 0.1 * i for i in range(10)]


@pytest.fixture(scope="module")
def cascade_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten held-out queries: scores 0.05 to 0.95; the light image scores 0.3, the heavy one 0.7."""
    path = tmp_path_factory.mktemp("cascade") / "cascade.json"
    curve = EscalationCurve.from_scores(SCORES, source="test")
    samples = [[s, 0.3, 0.7] for s in SCORES]
    body = {
        "curve": curve.as_json(),
        "samples": samples,
        "light_only": {"quality": 0.3},
        "heavy_only": {"quality": 0.7},
    }
    path.write_text(json.dumps(body))
    return path


def run(
    prompts: Prompts, settings: Settings, path: Path, *, allocator: Allocator, rate: float, workers: int = 4
) -> tuple[SimResult, CascadeSpec]:
    spec = CascadeSpec(
        profile=CascadeProfile.load(path), pair=PAIR, allocator=allocator, threshold=0.5, period_s=5.0
    )
    workload = build_workload(prompts, ArrivalSpec(kind=ArrivalKind.POISSON, rate_rps=rate, seed=3))
    config = SimConfig(
        profile=build_profile("diffserve", settings),
        costs=PAIR.costs(),
        cache_bytes=1,
        large_workers=workers - 1,
        small_workers=1,
        cascade=spec,
    )
    return run_simulation(workload, config, settings=settings, embeddings=None), spec


def test_requests_below_the_fixed_threshold_escalate_with_both_models(
    repeat_prompts: Prompts, bench_settings: Settings, cascade_file: Path
) -> None:
    result, spec = run(repeat_prompts, bench_settings, cascade_file, allocator=Allocator.MODM, rate=1.0)
    escalated = [spec.profile.draw(o.prompt_idx)[0] < 0.5 for o in result.outcomes]
    assert 0 < sum(escalated) < len(escalated)
    assert result.report.escalation_rate == pytest.approx(sum(escalated) / len(escalated), abs=1e-4)
    for outcome, up in zip(result.outcomes, escalated, strict=True):
        assert outcome.succeeded and not outcome.hit
        assert set(outcome.denoiser_evaluations) == ({PAIR.light, PAIR.heavy} if up else {PAIR.light})
        assert outcome.quality == (0.7 if up else 0.3)
    timeline = result.report.threshold_timeline
    assert timeline is not None and [p["threshold"] for p in timeline] == [0.5]  # fixed: one decision


def test_the_milp_lowers_the_threshold_under_load_and_violates_less_than_heavy_only(
    repeat_prompts: Prompts, bench_settings: Settings, cascade_file: Path
) -> None:
    """8 qps on 4 GPUs: heavy-only serves 4 / 1.78 = 2.2 qps and falls behind; the MILP escalates only
    what 3 heavy workers can take."""
    result, _ = run(repeat_prompts, bench_settings, cascade_file, allocator=Allocator.DIFFSERVE, rate=8.0)
    timeline = result.report.threshold_timeline
    assert timeline is not None and len(timeline) >= 2
    assert all(p["light"] + p["heavy"] == 4 for p in timeline)
    assert min(p["threshold"] for p in timeline) < 0.5
    heavy_only = result.report.vanilla_throughput_rps
    assert heavy_only is not None and result.report.throughput_rps is not None
    assert result.report.throughput_rps > heavy_only
    light, _ = run(repeat_prompts, bench_settings, cascade_file, allocator=Allocator.DIFFSERVE, rate=0.5)
    low = light.report.threshold_timeline
    assert low is not None and max(p["threshold"] for p in low) > min(p["threshold"] for p in timeline)


def test_a_curve_alone_draws_scores_with_its_f_of_t(tmp_path: Path) -> None:
    curve = EscalationCurve((0.0, 0.25, 0.5, 0.75, 1.0), (0.0, 0.1, 0.4, 0.8, 1.0), "test")
    path = tmp_path / "curve.json"
    path.write_text(json.dumps({"curve": curve.as_json()}))
    profile = CascadeProfile.load(path)
    draws = [profile.draw(i)[0] for i in range(5000)]
    for t, f in zip(curve.thresholds[1:-1], curve.escalated[1:-1], strict=True):
        assert sum(d < t for d in draws) / len(draws) == pytest.approx(f, abs=0.02)


def test_a_profile_without_f_of_t_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match="reprise cascade train --json"):
        CascadeProfile.load(path)


def test_with_a_measured_batch_table_the_milp_chooses_batch_sizes_and_the_workers_run_them(
    repeat_prompts: Prompts, bench_settings: Settings, cascade_file: Path
) -> None:
    """8 qps on 4 GPUs again, each model's latency per batch size its latency alone times a measured
    slowdown (a batch of 8 steps 3x as long as one): under load the MILP batches, and spends the
    capacity batching frees as DiffServe does, on quality: it escalates more queries to the heavy model."""
    slowdown = ((1, 1.0), (2, 1.25), (4, 1.8), (8, 3.0))
    spec = CascadeSpec(
        profile=CascadeProfile.load(cascade_file),
        pair=PAIR,
        allocator=Allocator.DIFFSERVE,
        threshold=0.5,
        period_s=5.0,
        batch_slowdown=slowdown,
        max_batch=8,
    )
    assert spec.model_profile("heavy", 1.0).latency_s == {1: 1.0, 2: 1.25, 4: 1.8, 8: 3.0}
    assert spec.model_profile("heavy", 1.0).throughput(8) == pytest.approx(8 / 3)
    capped = CascadeSpec(
        profile=spec.profile,
        pair=PAIR,
        allocator=Allocator.DIFFSERVE,
        threshold=0.5,
        period_s=5.0,
        batch_slowdown=slowdown,
        max_batch=2,
    )
    assert capped.model_profile("light", 0.1).batches == (1, 2)
    workload = build_workload(repeat_prompts, ArrivalSpec(kind=ArrivalKind.POISSON, rate_rps=8.0, seed=3))
    config = SimConfig(
        profile=build_profile("diffserve", bench_settings),
        costs=replace(PAIR.costs(), batch_slowdown=slowdown),
        cache_bytes=1,
        large_workers=3,
        small_workers=1,
        cascade=spec,
        max_batch=8,
    )
    batched = run_simulation(workload, config, settings=bench_settings, embeddings=None)
    timeline = batched.report.threshold_timeline
    assert timeline is not None
    assert max(int(p["heavy_batch"]) for p in timeline) > 1  # the heavy pool batches under load
    alone, _ = run(repeat_prompts, bench_settings, cascade_file, allocator=Allocator.DIFFSERVE, rate=8.0)
    assert batched.report.escalation_rate is not None and alone.report.escalation_rate is not None
    assert batched.report.escalation_rate > alone.report.escalation_rate
    late, late_alone = batched.report.slo_violations.x2, alone.report.slo_violations.x2
    assert late is not None and late_alone is not None and late <= late_alone


def test_under_load_hits_costlier_than_the_light_route_go_light_first(
    repeat_prompts: Prompts, repeat_embeddings: TraceEmbeddings, bench_settings: Settings, cascade_file: Path
) -> None:
    """Reprise mode (cache + cascade) at 8 qps on 4 GPUs: the MILP lowers the threshold, f(t) falls, and
    a repeat resumed on the light pool costs more than a light stage and its expected escalation
    (jobs.admission.cheaper_route); with cost-aware routing off every repeat is served as a hit."""
    workload = build_workload(repeat_prompts, ArrivalSpec(kind=ArrivalKind.POISSON, rate_rps=8.0, seed=3))
    reports = {}
    for aware in (True, False):
        spec = CascadeSpec(
            profile=CascadeProfile.load(cascade_file),
            pair=PAIR,
            allocator=Allocator.DIFFSERVE,
            threshold=0.5,
            period_s=5.0,
            cost_aware_hits=aware,
        )
        config = SimConfig(
            profile=build_profile("reprise", bench_settings),
            costs=PAIR.costs(),
            cache_bytes=2**40,
            large_workers=3,
            small_workers=1,
            cascade=spec,
        )
        result = run_simulation(workload, config, settings=bench_settings, embeddings=repeat_embeddings)
        reports[aware] = (result.report, sum(o.hit for o in result.outcomes))
    (aware_report, aware_hits), (plain_report, plain_hits) = reports[True], reports[False]
    assert plain_report.costlier_hits == 0 and plain_hits > 0
    assert aware_report.costlier_hits is not None and aware_report.costlier_hits > 0
    assert aware_hits < plain_hits  # a request may find an entry more than once (each lookup prices it)
