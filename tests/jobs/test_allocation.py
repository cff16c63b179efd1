"""DiffServe's allocation MILP (3.3) on worked examples: each expected plan is computed by hand in
the test's docstring from the paper's constraints (1)-(4), lambda = 1.05."""

from __future__ import annotations

import pytest

from jobs.policies.allocation import (
    AllocationProblem,
    Demand,
    ModelProfile,
    ewma,
    solve_allocation,
)
from jobs.policies.cascade import THRESHOLD_GRID, EscalationCurve

LINEAR = EscalationCurve(THRESHOLD_GRID, THRESHOLD_GRID, "f(t) = t")
TURBO = ModelProfile("sd-turbo", {1: 0.1})  # DiffServe 4.1, per image on an A100
SD15 = ModelProfile("sd-v1-5", {1: 1.78})


def problem(rate: float, workers: int, *, slo_s: float = 5.0, **changes: object) -> AllocationProblem:
    fields: dict[str, object] = {
        "light": TURBO,
        "heavy": SD15,
        "demand": Demand(rate),
        "curve": LINEAR,
        "workers": workers,
        "slo_s": slo_s,
    }
    fields.update(changes)
    return AllocationProblem(**fields)  # type: ignore[arg-type]


def test_the_highest_threshold_the_heavy_pool_can_serve() -> None:
    """16 qps on 16 GPUs: lambda D = 16.8. The light model serves 10/s per worker: 2 workers. The
    other 14 serve 14 / 1.78 = 7.865 escalations/s, so f(t) <= 7.865 / 16.8 = 0.468: t = 0.45."""
    plan = solve_allocation(problem(16.0, 16))
    assert (plan.threshold, plan.light_workers, plan.heavy_workers) == (0.45, 2, 14)
    assert plan.feasible and plan.latency_met and plan.fallback is None
    assert plan.escalated == pytest.approx(0.45)
    assert plan.capacity["heavy_rps"] >= 16.8 * plan.escalated


def test_low_demand_escalates_everything_it_can() -> None:
    """2 qps: even f = 1 needs only 2.1 x 1.78 = 3.7 heavy workers of 16: the top threshold, and the
    spare workers go where the headroom is smallest (the heavy pool)."""
    plan = solve_allocation(problem(2.0, 16))
    assert plan.threshold == 1.0
    assert plan.light_workers == 1 and plan.heavy_workers == 15
    assert plan.headroom is not None and plan.headroom > 1.0


def test_rising_demand_lowers_the_threshold() -> None:
    thresholds = [solve_allocation(problem(d, 16)).threshold for d in (4, 8, 12, 16, 24, 40)]
    assert thresholds == sorted(thresholds, reverse=True)
    assert thresholds[0] == 1.0 and thresholds[-1] < 0.2


def test_infeasible_demand_says_so_and_takes_the_stated_fallback() -> None:
    """200 qps on 4 GPUs: even all four on the light model serve 40/s < 210/s: no allocation."""
    plan = solve_allocation(problem(200.0, 4))
    assert not plan.feasible and plan.objective is None
    assert plan.fallback is not None and plan.fallback.startswith("infeasible")
    assert plan.threshold == THRESHOLD_GRID[0]  # the fewest escalations
    assert (plan.light_workers, plan.heavy_workers) == (4, 0)  # f(0) = 0: all the work is light


def test_fallback_splits_by_work_when_the_lowest_threshold_escalates() -> None:
    """f(0) = 0.5: at 100 qps the light work is 105 x 0.1 = 10.5 worker-s/s and the heavy 52.5 x 1.78
    = 93.5: of 8 workers, round(8 x 93.5 / 104) = 7 heavy and 1 light."""
    curve = EscalationCurve((0.0, 1.0), (0.5, 1.0), "f starts at 0.5")
    plan = solve_allocation(problem(100.0, 8, curve=curve))
    assert not plan.feasible
    assert (plan.light_workers, plan.heavy_workers) == (1, 7)


def test_an_unreachable_slo_takes_the_fewest_escalations() -> None:
    """A 1 s SLO under a 1.78 s heavy model: no allocation meets (1). Infeasible: the lowest threshold,
    f(0) = 0, so all 16 workers go to the light model, where the headroom is (never t = 0.45, the
    highest threshold throughput alone allows, whose escalations could only wait longer)."""
    plan = solve_allocation(problem(16.0, 16, slo_s=1.0))
    assert not plan.latency_met and not plan.feasible
    assert plan.fallback is not None and plan.fallback.startswith("infeasible") and "SLO" in plan.fallback
    assert (plan.threshold, plan.escalated) == (THRESHOLD_GRID[0], 0.0)
    assert (plan.light_workers, plan.heavy_workers) == (16, 0)


def test_queueing_past_the_slo_at_low_demand_escalates_least_not_most() -> None:
    """The live cold start: 2 qps that 16 workers could serve at any threshold (escalating all at t = 1
    when the SLO holds), but 4 s queued at each stage, 0.1 + 4 + 1.78 + 4 > 5 s. Infeasible: the lowest
    threshold, never t = 1 (every light image escalated); the heavy pool still serves f(0)."""
    curve = EscalationCurve((0.0, 0.5, 1.0), (0.2, 0.6, 1.0), "f(0) = 0.2")
    queued = Demand(2.0, light_wait_s=4.0, heavy_wait_s=4.0)
    assert solve_allocation(problem(2.0, 16, curve=curve)).threshold == 1.0  # without the queueing
    plan = solve_allocation(problem(2.0, 16, curve=curve, demand=queued))
    assert not plan.feasible and plan.threshold == 0.0 and plan.escalated == pytest.approx(0.2)
    assert plan.heavy_workers >= 1 and plan.capacity["heavy_rps"] >= 1.05 * 2.0 * 0.2


def test_batch_size_is_chosen_with_the_threshold() -> None:
    """Heavy at batch 4 takes 4.0 s (1 query/s per worker) against 1.78 s at batch 1 (0.56/s). 4 qps
    on 4 GPUs: lambda D = 4.2, one light worker, three heavy. Batch 4 serves 3/s: f <= 0.714, t = 0.7;
    batch 1 serves 1.69/s: t = 0.4. With a 20 s SLO batch 4 wins. With 4.5 s it cannot: 0.1 + 4.0 +
    a batch filling for 3 / 4.2 s = 4.81 s > 4.5 s, so batch 1 and t = 0.4."""
    heavy = ModelProfile("sd-v1-5", {1: 1.78, 4: 4.0})
    loose = solve_allocation(problem(4.0, 4, slo_s=20.0, heavy=heavy))
    assert (loose.heavy_batch, loose.threshold, loose.heavy_workers) == (4, 0.7, 3)
    tight = solve_allocation(problem(4.0, 4, slo_s=4.5, heavy=heavy))
    assert (tight.heavy_batch, tight.threshold) == (1, 0.4)
    assert tight.latency_met


def test_pool_bounds_hold() -> None:
    """Pins hold the heavy pool at 2: 2 / 1.78 = 1.12 escalations/s of 16.8, f <= 0.067: t = 0.05."""
    plan = solve_allocation(problem(16.0, 16, heavy_bounds=(2, 2)))
    assert plan.heavy_workers == 2 and plan.light_workers == 14
    assert plan.threshold == 0.05


def test_hits_on_the_light_model_take_light_capacity() -> None:
    """Hits on the small model add light work: 16 cascade queries/s plus 40 hit-equivalents/s need
    ceil(58.8 / 10) = 6 light workers, leaving 10 heavy: f <= 5.618 / 16.8 = 0.334, t = 0.3."""
    plan = solve_allocation(problem(16.0, 16, demand=Demand(16.0, light_rps=56.0)))
    assert (plan.light_workers, plan.heavy_workers, plan.threshold) == (6, 10, 0.3)


def test_no_demand_keeps_the_top_threshold() -> None:
    plan = solve_allocation(problem(0.0, 4))
    assert plan.threshold == 1.0 and plan.feasible and plan.headroom is None


def test_a_pool_without_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="no worker"):
        solve_allocation(problem(1.0, 0))


def test_ewma_weighs_the_newest_period_by_alpha() -> None:
    assert ewma(None, 4.0) == 4.0
    assert ewma(2.0, 4.0) == pytest.approx(3.0)
    assert ewma(2.0, 4.0, alpha=0.25) == pytest.approx(2.5)
