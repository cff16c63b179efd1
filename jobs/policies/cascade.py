"""DiffServe's model cascade (3.2): the light model's image is kept when the discriminator's confidence
reaches the threshold, else the query goes on to the heavy model.

The confidence is the discriminator's probability that the image is a real one (its softmax over
real / fake); a higher threshold asks more of the light model, so more queries are escalated. The
fraction escalated at a threshold, f(t), is what the allocation MILP trades against throughput
(jobs.policies.allocation): profiled offline when the discriminator is trained, and measured again on
the scores of the queries served (DiffServe 3.3: "f(t) is initialized through offline profiling and
updated during model serving").

Pure: no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.vocabulary import DiscriminatorFeatures

THRESHOLD_GRID: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(21))
"""The thresholds the MILP chooses among: 0.00 to 1.00 by 0.05. f(t) has no closed form, so the MILP
picks one of a grid (one binary per threshold); DiffServe does not publish its grid."""

QUANTILE_STEPS = 20
"""A profiled curve's grid: thresholds at every 5% of the profiled scores (`quantile_grid`)."""

MIN_MEASURED_SCORES = 50
"""Scores served in a period before they replace the profiled f(t): below it, one period's scores
say too little about the fraction escalated (our choice; DiffServe gives no number)."""


def quantile_grid(scores: Sequence[float], steps: int = QUANTILE_STEPS) -> tuple[float, ...]:
    """Thresholds at every 1/steps of `scores`, with 0 and 1: f(t) then rises by about 1/steps per
    grid step. A fixed grid on [0, 1] cannot tune a discriminator whose confidences in generated images
    bunch near 0 (on the lab most are below 0.05: from t = 0 to 0.05, f jumps from 0 to 0.6 or more)."""
    if not scores:
        raise ValueError("no scores to place thresholds at")
    ordered = sorted(scores)
    points = {0.0, 1.0}
    for i in range(1, steps):
        points.add(round(ordered[min(len(ordered) - 1, i * len(ordered) // steps)], 6))
    return tuple(sorted(p for p in points if 0.0 <= p <= 1.0))


def feature_kind_for(light_model: str) -> DiscriminatorFeatures:
    """The lab's discriminator network reads the lab's images; every other model's go through CLIP."""
    return DiscriminatorFeatures.LAB if light_model.startswith("lab:") else DiscriminatorFeatures.CLIP


def accepts(score: float, threshold: float) -> bool:
    """DiffServe 3.2: the light model's image is the response when its confidence reaches the threshold."""
    return score >= threshold


@dataclass(frozen=True, slots=True)
class EscalationCurve:
    """f(t): the fraction of queries escalated to the heavy model at each threshold of a grid, with
    where it came from. Non-decreasing in t: a higher threshold escalates at least as much."""

    thresholds: tuple[float, ...]
    escalated: tuple[float, ...]
    source: str

    def __post_init__(self) -> None:
        if not self.thresholds or len(self.thresholds) != len(self.escalated):
            raise ValueError("an escalation curve needs one escalated fraction per threshold")
        if list(self.thresholds) != sorted(set(self.thresholds)):
            raise ValueError("thresholds must be strictly increasing")
        if any(not 0.0 <= f <= 1.0 for f in self.escalated):
            raise ValueError("escalated fractions are in [0, 1]")
        if any(b < a - 1e-12 for a, b in zip(self.escalated, self.escalated[1:], strict=False)):
            raise ValueError("f(t) must not decrease as the threshold rises")

    @classmethod
    def from_scores(
        cls, scores: Sequence[float], *, grid: Sequence[float] = THRESHOLD_GRID, source: str
    ) -> EscalationCurve:
        """The empirical f(t): the share of `scores` below each threshold (those `accepts` refuses)."""
        if not scores:
            raise ValueError("no scores to measure f(t) from")
        ordered = sorted(scores)
        fractions = tuple(bisect.bisect_left(ordered, t) / len(ordered) for t in grid)
        return cls(tuple(grid), fractions, source)

    def at(self, threshold: float) -> float:
        """f(t), linear between grid points, constant beyond the ends."""
        ts = self.thresholds
        if threshold <= ts[0]:
            return self.escalated[0]
        if threshold >= ts[-1]:
            return self.escalated[-1]
        i = bisect.bisect_right(ts, threshold)
        share = (threshold - ts[i - 1]) / (ts[i] - ts[i - 1])
        return self.escalated[i - 1] + share * (self.escalated[i] - self.escalated[i - 1])

    def as_json(self) -> dict[str, Any]:
        return {"thresholds": list(self.thresholds), "escalated": list(self.escalated), "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EscalationCurve:
        return cls(
            tuple(float(t) for t in data["thresholds"]),
            tuple(float(f) for f in data["escalated"]),
            str(data.get("source", "file")),
        )
