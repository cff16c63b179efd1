"""What admission prices a hit with under the cascade: the allocator's newest decision, read as costs."""

from __future__ import annotations

import pytest

from jobs.route_costs import costs_of

MEASURED = {"small_step_ms": 20.0, "large_step_ms": 40.0, "light_latency_s": 0.08, "heavy_latency_s": 2.0}


def test_a_measured_decision_prices_a_hit_on_the_pool_that_serves_hits() -> None:
    on_small = costs_of(MEASURED, {"escalated": 0.25}, hits_on_large=False)
    on_large = costs_of(MEASURED, {"escalated": 0.25}, hits_on_large=True)
    assert on_small is not None and on_large is not None
    assert (on_small.hit_step_s, on_large.hit_step_s) == (0.02, 0.04)
    assert on_small.miss_s() == pytest.approx(0.08 + 0.25 * 2.0)


@pytest.mark.parametrize("missing", ["small_step_ms", "light_latency_s", "heavy_latency_s"])
def test_a_cold_start_decision_prices_nothing(missing: str) -> None:
    """A cold start records the step times it knows but no latency or f(t): the hit then stands."""
    inputs = {name: value for name, value in MEASURED.items() if name != missing}
    assert costs_of(inputs, {"escalated": 0.25}, hits_on_large=False) is None
    assert costs_of(MEASURED, {"threshold": 0.5}, hits_on_large=False) is None
