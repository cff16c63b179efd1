"""The cascade's decision (DiffServe 3.2) and f(t), the fraction escalated at each threshold."""

from __future__ import annotations

import pytest

from core.vocabulary import DiscriminatorFeatures
from jobs.policies.cascade import THRESHOLD_GRID, EscalationCurve, accepts, feature_kind_for, quantile_grid


def test_a_light_image_is_kept_at_or_above_the_threshold() -> None:
    assert accepts(0.5, 0.5) and accepts(0.9, 0.5)
    assert not accepts(0.49, 0.5)
    assert accepts(0.0, 0.0)  # threshold 0: the light model answers everything
    assert not accepts(0.999, 1.0)  # threshold 1: (nearly) everything escalates


def test_f_of_t_is_the_share_of_scores_below_each_threshold() -> None:
    curve = EscalationCurve.from_scores([0.1, 0.2, 0.2, 0.6, 0.9], grid=(0.0, 0.2, 0.5, 1.0), source="test")
    assert curve.escalated == (0.0, 0.2, 0.6, 1.0)
    for t, f in zip(curve.thresholds, curve.escalated, strict=True):  # agrees with `accepts`
        assert f == sum(not accepts(s, t) for s in [0.1, 0.2, 0.2, 0.6, 0.9]) / 5


def test_f_between_grid_points_is_interpolated() -> None:
    curve = EscalationCurve((0.0, 0.5, 1.0), (0.0, 0.4, 1.0), "test")
    assert curve.at(0.25) == pytest.approx(0.2)
    assert curve.at(-1.0) == 0.0 and curve.at(2.0) == 1.0


def test_a_curve_must_not_fall_as_the_threshold_rises() -> None:
    with pytest.raises(ValueError, match="must not decrease"):
        EscalationCurve((0.0, 1.0), (0.5, 0.4), "bad")
    with pytest.raises(ValueError, match="strictly increasing"):
        EscalationCurve((0.5, 0.0), (0.1, 0.2), "bad")
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        EscalationCurve((0.0,), (1.5,), "bad")
    with pytest.raises(ValueError, match="no scores"):
        EscalationCurve.from_scores([], source="none")


def test_curve_round_trips_through_json() -> None:
    curve = EscalationCurve.from_scores([0.3, 0.7], source="x")
    again = EscalationCurve.from_json(curve.as_json())
    assert again == curve and again.thresholds == THRESHOLD_GRID


def test_lab_models_are_read_by_the_judge_others_by_clip() -> None:
    assert feature_kind_for("lab:small") is DiscriminatorFeatures.LAB
    assert feature_kind_for("stabilityai/sd-turbo") is DiscriminatorFeatures.CLIP


def test_a_quantile_grid_moves_f_by_even_steps_where_scores_bunch() -> None:
    scores = [0.001 * i for i in range(95)] + [0.5, 0.6, 0.7, 0.8, 0.9]  # 95% of them below 0.1
    grid = quantile_grid(scores)
    assert grid[0] == 0.0 and grid[-1] == 1.0 and list(grid) == sorted(set(grid))
    curve = EscalationCurve.from_scores(scores, grid=grid, source="test")
    steps = [b - a for a, b in zip(curve.escalated, curve.escalated[1:], strict=False)]
    assert max(steps) <= 0.06  # about 1/20 per step, where the fixed grid jumps
    fixed = EscalationCurve.from_scores(scores, source="test")
    assert fixed.escalated[1] - fixed.escalated[0] >= 0.5  # 0 -> 0.05 escalates half of them at once
    with pytest.raises(ValueError, match="no scores"):
        quantile_grid([])
