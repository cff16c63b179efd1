"""`bench simulate --compare` checks the speedup over vanilla, calibrated on the replay's live vanilla run."""

from __future__ import annotations

from typing import Any

from bench.run.compare import NO_VANILLA, NOT_CHECKED, THROUGHPUT_TOLERANCE, compare_reports
from tests.bench.run.test_report import report


def _replay(throughput: float, vanilla_measured: float | None) -> dict[str, Any]:
    """A replay's JSON: the estimate from costs (vanilla_throughput_rps) is not what the check reads."""
    data = report(throughput_rps=throughput, vanilla_throughput_rps=0.25).as_json()
    if vanilla_measured is not None:
        data["vanilla_measured_rps"] = vanilla_measured
    return data


def _speedup(sim: float, sim_vanilla: float, replay: dict[str, Any]) -> Any:
    comparison = compare_reports(report(throughput_rps=sim, vanilla_throughput_rps=sim_vanilla), replay)
    return comparison, next(c for c in comparison.checks if c.name == "speedup")


def test_the_level_cancels_and_the_ratio_is_checked() -> None:
    """Simulated at 3x the stack's level (one device a worker against shared cores), the same ratio."""
    comparison, check = _speedup(7.5, 6.0, _replay(2.5, 2.0))
    assert check.ok and comparison.ok, comparison.describe()
    assert check.simulated == 1.25 and check.measured == 1.25
    assert abs(check.tolerance - THROUGHPUT_TOLERANCE * 1.25) < 1e-12


def test_the_issues_case_disagrees() -> None:
    """The simulator predicting vanilla's throughput where the stack served 0.75 of it."""
    comparison, check = _speedup(2.656, 2.656, _replay(1.934, 2.571))
    assert not check.ok and not comparison.ok
    assert [c.name for c in comparison.checks if not c.ok] == ["speedup"]
    assert "DISAGREES" in comparison.describe()


def test_the_tolerance_is_relative_to_the_measured_speedup() -> None:
    inside = 1.0 + 0.9 * THROUGHPUT_TOLERANCE
    outside = 1.0 + 1.1 * THROUGHPUT_TOLERANCE
    assert _speedup(inside * 4.0, 4.0, _replay(3.0, 3.0))[1].ok
    assert not _speedup(outside * 4.0, 4.0, _replay(3.0, 3.0))[1].ok


def test_a_replay_without_a_live_vanilla_run_fails_the_check_and_says_why() -> None:
    """Nothing to check the speedup against is no agreement: the check fails, naming the two ways out."""
    comparison, check = _speedup(1.0, 1.0, _replay(1.0, None))  # the same throughput: still no check
    assert not check.ok and check.measured is None and not comparison.ok
    assert check.note == NO_VANILLA and "--vanilla" in check.note and "--no-throughput" in check.note
    assert NO_VANILLA in comparison.describe() and "DISAGREES" in comparison.describe()


def test_no_throughput_leaves_the_speedup_unchecked_and_says_so() -> None:
    """Asked not to check, the speedup passes as unchecked, whatever the figures, and the verdict and
    the JSON name it; the other checks are made as before."""
    replay = _replay(1.0, None)
    comparison = compare_reports(
        report(throughput_rps=9.0, vanilla_throughput_rps=1.0), replay, throughput=False
    )
    check = next(c for c in comparison.checks if c.name == "speedup")
    assert check.ok and not check.checked and check.note == NOT_CHECKED
    assert comparison.ok and comparison.unchecked == ("speedup",)
    assert "speedup NOT CHECKED" in comparison.describe().splitlines()[-1]
    data = comparison.as_json()
    assert data["not_checked"] == ["speedup"] and data["checks"]["speedup"]["checked"] is False
    assert all(data["checks"][name]["checked"] for name in ("hit_rate", "compute_saved", "k_histogram"))
    wrong = compare_reports(report(hit_rate=0.9), replay, throughput=False)  # another check still fails
    assert [c.name for c in wrong.checks if not c.ok] == ["hit_rate"]
    with_vanilla = compare_reports(report(throughput_rps=9.0, vanilla_throughput_rps=1.0), _replay(1.0, 1.0))
    assert not with_vanilla.ok and with_vanilla.unchecked == ()  # checked by default: 9x against 1x


def test_a_simulation_without_vanilla_cannot_agree() -> None:
    _, check = _speedup(3.0, 0.0, _replay(2.0, 2.0))
    assert not check.ok and check.simulated is None


def test_compute_saved_weighed_by_other_costs_is_not_compared() -> None:
    """A replay weighed by the default costs (small/large 0.375), a simulation by a lab file's (0.58)."""
    default = {"large_step_ms": 146.1, "small_step_ms": 54.8, "source": "defaults"}
    lab = {"large_step_ms": 21.0, "small_step_ms": 12.2, "source": "runtime.json"}
    replay = {**report().as_json(), "step_costs": default}
    same = compare_reports(report(step_costs=default), replay)
    other = compare_reports(report(step_costs=lab), replay)
    assert next(c for c in same.checks if c.name == "compute_saved").ok
    check = next(c for c in other.checks if c.name == "compute_saved")
    assert not check.ok and "pass both the same --costs" in check.note and not other.ok
    before = compare_reports(report(step_costs=lab), report().as_json(), throughput=False)
    assert before.ok  # a replay from before step_costs
