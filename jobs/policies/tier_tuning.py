"""LatentBox's online marginal-hit tuning of the image/latent split alpha (section 4.3).

Over a window of W reads a node counts image misses, full misses and the hits in each tier's tail
(dual_format.WindowCounts). With the latency of a decode and of a blob-store fetch tracked as
exponentially weighted moving averages, the gradient of the expected read latency (Eq. 1) is

    D = -delta_img * (T_decode + T_fetch * MR_lat) + T_fetch * MR_img * delta_lat      (Eq. 2)

    MR_img = image misses / requests        delta_img = image tail hits / requests
    MR_lat = full misses / image misses     delta_lat = latent tail hits / image misses

and alpha moves one fixed step against its sign: D < 0, the image tier is worth more (alpha + step);
D > 0, the latent tier is (alpha - step). No miss-ratio curve is ever built.

Defaults are the paper's simulation defaults (section 6.5): T_decode 40 ms, T_fetch 140 ms as the
starting estimates, step 0.005, tail tau 0.10, promotion threshold h 8. Its window, W = 1,000,000
reads, is sized for a 2.07 B-read trace; section 6.5.4 finds W >= 200 K within 0.2% of the best and
W = 10 K within 3%. A node sees far fewer reads, so REPRISE_READ_WINDOW defaults to 1,000 (README).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jobs.policies.dual_format import WindowCounts

# Section 6.5's defaults (and 6.5.4's sensitivity study around them).
T_DECODE_S = 0.040
T_FETCH_S = 0.140
STEP = 0.005
TAIL_FRACTION = 0.10
PROMOTE_AFTER = 8
# Our own: the weight of the newest latency sample (the paper names no weight); 0.1 averages over about
# the last 10 decodes, long enough to ignore one slow outlier, short enough to follow a loaded GPU.
LATENCY_EWMA_WEIGHT = 0.1


@dataclass(frozen=True, slots=True)
class Gradient:
    """The inputs of Eq. 2 measured over one window, and D itself."""

    mr_img: float
    mr_lat: float
    delta_img: float
    delta_lat: float
    t_decode_s: float
    t_fetch_s: float
    d: float


def gradient(counts: WindowCounts, *, t_decode_s: float, t_fetch_s: float) -> Gradient:
    """Eq. 2 at the window's operating point. A window with no image miss has MR_lat = delta_lat = 0."""
    requests = max(1, counts.requests)
    mr_img = counts.image_misses / requests
    delta_img = counts.image_tail_hits / requests
    if counts.image_misses:
        mr_lat = counts.full_misses / counts.image_misses
        delta_lat = counts.latent_tail_hits / counts.image_misses
    else:
        mr_lat = delta_lat = 0.0
    d = -delta_img * (t_decode_s + t_fetch_s * mr_lat) + t_fetch_s * mr_img * delta_lat
    return Gradient(mr_img, mr_lat, delta_img, delta_lat, t_decode_s, t_fetch_s, d)


def step_alpha(alpha: float, d: float, step: float = STEP) -> float:
    """One step of alpha against the gradient's sign, kept in [0, 1]; D = 0 leaves it."""
    if d < 0:
        alpha += step
    elif d > 0:
        alpha -= step
    return min(1.0, max(0.0, alpha))


def ewma(previous: float, observed: float, weight: float = LATENCY_EWMA_WEIGHT) -> float:
    if not math.isfinite(observed) or observed < 0:
        return previous
    return weight * observed + (1.0 - weight) * previous


@dataclass(frozen=True, slots=True)
class Decision:
    """One window's decision, as recorded for /v1/stats and Prometheus."""

    alpha_before: float
    alpha: float
    promote_after: int
    reads: int
    gradient: Gradient


@dataclass
class MarginalTuner:
    """alpha's controller on one node: latency estimates, and a step per closed window."""

    window: int = 1000
    step: float = STEP
    adaptive: bool = True
    t_decode_s: float = T_DECODE_S
    t_fetch_s: float = T_FETCH_S

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("the tuning window must hold at least one read")
        if not 0.0 < self.step <= 1.0:
            raise ValueError(f"the alpha step must be in (0, 1], got {self.step}")

    def observe_decode(self, seconds: float) -> None:
        self.t_decode_s = ewma(self.t_decode_s, seconds)

    def observe_fetch(self, seconds: float) -> None:
        self.t_fetch_s = ewma(self.t_fetch_s, seconds)

    def due(self, counts: WindowCounts) -> bool:
        return counts.requests >= self.window

    def decide(self, alpha: float, counts: WindowCounts, *, promote_after: int) -> Decision:
        """The window's gradient and the next alpha (the same alpha when the split is fixed)."""
        measured = gradient(counts, t_decode_s=self.t_decode_s, t_fetch_s=self.t_fetch_s)
        after = step_alpha(alpha, measured.d, self.step) if self.adaptive else alpha
        return Decision(alpha, after, promote_after, counts.requests, measured)
