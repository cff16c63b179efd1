"""`bench simulate --compare` checks the quality drop as it checks hit rate and compute saved."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.run.compare import QUALITY_TOLERANCE, compare_reports
from bench.run.report import BenchReport, Quality
from tests.bench.run.test_report import report


def _judged(drop: float | None, interval: tuple[float, float] | None = None) -> BenchReport:
    quality = Quality(
        hit_mean=0.6,
        hit_p5=0.3,
        miss_mean=0.7,
        drop_mean=drop,
        hit_drop_mean=None,
        judged=200,
        compared=120,
        source="test",
        drop_ci95=interval,
        audited=20,
    )
    return replace(report(), quality=quality)


def test_a_predicted_drop_within_the_tolerance_agrees() -> None:
    comparison = compare_reports(_judged(0.03), _judged(0.04, (0.03, 0.05)).as_json(), throughput=False)
    assert comparison.ok, comparison.describe()
    check = next(c for c in comparison.checks if c.name == "quality_drop")
    assert check.tolerance == pytest.approx(QUALITY_TOLERANCE + 0.01)  # and half the interval's width
    assert "agrees" in comparison.describe()


def test_the_issues_prediction_disagrees_with_its_measurement() -> None:
    """-0.002 predicted against 0.055 measured (a 300-request lab trace, 64 hits audited)."""
    comparison = compare_reports(_judged(-0.002), _judged(0.055, (0.035, 0.077)).as_json(), throughput=False)
    assert not comparison.ok
    assert [c.name for c in comparison.checks if not c.ok] == ["quality_drop"]
    assert "DISAGREES" in comparison.describe()


def test_the_measured_intervals_half_width_adds_to_the_tolerance() -> None:
    """A measurement is itself a sample: a prediction within the tolerance of the true drop lies within
    the tolerance plus the measurement's half interval of the measured one."""
    assert compare_reports(
        _judged(0.0), _judged(0.05, (-0.01, 0.11)), throughput=False
    ).ok  # within 0.02 + 0.06
    assert compare_reports(
        _judged(0.0), _judged(0.029, (0.019, 0.039)), throughput=False
    ).ok  # 0.029 within 0.02 + 0.01
    assert not compare_reports(_judged(0.0), _judged(0.031, (0.021, 0.041)), throughput=False).ok
    assert not compare_reports(_judged(0.0), _judged(0.05, (0.04, 0.06)), throughput=False).ok


def test_an_unmeasured_drop_is_not_agreement_but_an_unjudged_trace_checks_nothing() -> None:
    assert not compare_reports(_judged(0.01), _judged(None), throughput=False).ok  # judged, no hit audited
    assert not compare_reports(
        _judged(0.01), report(), throughput=False
    ).ok  # a lab replay with its quality missing
    assert compare_reports(report(), report(), throughput=False).ok  # neither judged (not a lab trace)
