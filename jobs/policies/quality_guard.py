"""The quality guard: NIRVANA's threshold table (Algorithm 1), held to a quality target online. Pure.

NIRVANA profiles once, offline, the lowest similarity at which each K keeps quality within its
tolerance (Algorithm 1, Eq. 10) and serves from that table ever after. The guard keeps asking the same
question while serving: audits (a hit against a fresh generation of the same request) give a running
estimate of the drop per (similarity bin, k), and each row's threshold moves with it:

- Tighten: when the bin a row's lowest hits fall in holds at least `min_sample` audits and its
  estimate exceeds the target, the threshold rises past it, and past every bin above it that is known
  to exceed the target too (one pass, not one bin per pass: quality first).
- Loosen, with hysteresis: a row above its configured threshold comes down one bin when its lowest
  bin's estimate is below target - hysteresis and the bin it would admit again is not known to be
  above that (a bin once tightened away keeps its audits, see WINDOW).
- Pooled, while the lowest bin is short of `min_sample`: the row's hits are spread over the bins at
  and above its threshold, and its lowest bin alone may take long to fill; then the row's pooled
  estimate (every audit of its k from its lowest bin up: the hits the row serves) decides, and a row
  whose pooled mean exceeds the target rises one bin (its lowest hits, the likeliest to lose, go
  first). Measured live: bins of 0.025 gathered too few audits for the per-bin rule to act within a
  replay of hundreds of requests. Loosening needs the bin's own sample.
- Hold: without `min_sample` audits in the lowest bin or, pooled, from it up, nothing changes.
- Bounds: a row never goes below the configured table's threshold (the guard only ever restricts
  what was profiled), never above 1 - index x BIN_WIDTH (room for the rows above it), and the table
  stays valid: a higher similarity always allows a larger k (NIRVANA Figure 10), so a row pushed up
  pushes the rows of larger k above it.

The estimate is a window, the newest WINDOW audits of each (bin, k), not a decay: the drop at a
similarity and k is a property of the models and the prompts, not of the table, so an audit stays
evidence after the table changes; the window bounds how long a drift (another model, another
workload) is remembered.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jobs.policies.k_selection import ThresholdRow, ThresholdTable

BIN_WIDTH = 0.025
"""Width of a similarity bin, and the step of a threshold. A quarter of NIRVANA's smallest row spacing
(0.05, Figure 10): fine enough to move a row less than the distance to its neighbour, wide enough that
a bin gathers its minimum sample within one replay of a few hundred requests."""
WINDOW = 64
"""Audits kept per (bin, k): four minimum samples, so an estimate rests on at most the last 64."""
CEILING = 1.0  # the top row's highest threshold: cosine similarities never pass it under '>'


@dataclass(frozen=True, slots=True)
class Audit:
    """One audited hit: its similarity, the k it skipped and the drop (fresh score - hit score)."""

    similarity: float
    k: int
    drop: float


@dataclass(frozen=True, slots=True)
class GuardConfig:
    target: float
    hysteresis: float
    min_sample: int


@dataclass(frozen=True, slots=True)
class BinEstimate:
    """The drop estimate of one (similarity bin, k): the mean of its newest audits."""

    index: int  # the bin [index x BIN_WIDTH, (index + 1) x BIN_WIDTH)
    k: int
    n: int
    drop_mean: float

    @property
    def lo(self) -> float:
        return round(self.index * BIN_WIDTH, 6)

    @property
    def hi(self) -> float:
        return round((self.index + 1) * BIN_WIDTH, 6)


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row's move: its k, the threshold before and after, and the estimate that moved it."""

    k: int
    old: float
    new: float
    reason: str  # "tighten", "tighten-pooled", "loosen", or "pushed" (by a row below it that rose)
    drop_mean: float
    n: int


@dataclass(frozen=True, slots=True)
class GuardDecision:
    table: ThresholdTable
    changes: tuple[RowChange, ...]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


Estimates = Mapping[tuple[int, int], BinEstimate]


def bin_of(similarity: float) -> int:
    """The bin a similarity falls in (a small tolerance keeps a threshold on an edge in its own bin)."""
    return math.floor(similarity / BIN_WIDTH + 1e-9)


def estimate(audits: Iterable[Audit]) -> dict[tuple[int, int], BinEstimate]:
    """The windowed mean drop per (bin, k), from audits given newest first."""
    kept: dict[tuple[int, int], list[float]] = defaultdict(list)
    for audit in audits:
        drops = kept[(bin_of(audit.similarity), audit.k)]
        if len(drops) < WINDOW:
            drops.append(audit.drop)
    return {
        key: BinEstimate(key[0], key[1], len(drops), sum(drops) / len(drops)) for key, drops in kept.items()
    }


def adjust(
    current: ThresholdTable,
    base: ThresholdTable,
    estimates: Estimates,
    served_k: Mapping[int, int],
    config: GuardConfig,
) -> GuardDecision:
    """The table after one pass over the estimates. `current` is the table in use (the configured
    `base`, or the guard's last), row for row the same k's as `base`; `served_k` maps a row's profiled k
    to the k its hits skip on this deployment's schedule (jobs.admission.scale_k), the k audits record."""
    if current.ks != base.ks:
        raise ValueError(
            f"the guarded table {current.describe()} does not have the rows of {base.describe()}"
        )
    thresholds = [row.similarity for row in current.rows]
    causes: dict[int, tuple[str, BinEstimate]] = {}
    for index, row in enumerate(current.rows):
        k = served_k.get(row.k, row.k)
        floor, ceiling = base.rows[index].similarity, CEILING - index * BIN_WIDTH
        moved = _tightened(row.similarity, k, estimates, config) or _loosened(
            row.similarity, floor, k, estimates, config
        )
        if moved is not None:
            thresholds[index] = round(min(max(moved[0], floor), ceiling), 6)
            causes[index] = (moved[1], moved[2])
    thresholds = _valid(thresholds)
    if not causes or thresholds == [row.similarity for row in current.rows]:
        return GuardDecision(current, ())
    table = ThresholdTable(
        name=f"{base.name} (guarded)",
        rows=tuple(
            ThresholdRow(similarity, row.k) for similarity, row in zip(thresholds, current.rows, strict=True)
        ),
        comparison=base.comparison,
        source=f"the quality guard, from {base.name}",
        mode=base.mode,
        profiled_with=base.profiled_with,
    )
    pusher = next(iter(causes.values()))  # a row moved only by the rows below it: "pushed"
    changes = tuple(
        RowChange(row.k, row.similarity, new, *_cause(causes.get(index, ("pushed", pusher[1]))))
        for index, (row, new) in enumerate(zip(current.rows, thresholds, strict=True))
        if new != row.similarity
    )
    return GuardDecision(table, changes)


def _cause(cause: tuple[str, BinEstimate]) -> tuple[str, float, int]:
    reason, lowest = cause
    return reason, lowest.drop_mean, lowest.n


def _tightened(
    threshold: float, k: int, estimates: Estimates, config: GuardConfig
) -> tuple[float, str, BinEstimate] | None:
    """Past the lowest bin and every bin above it known to exceed the target; None when the lowest
    bin is not known to."""
    lowest = estimates.get((bin_of(threshold), k))
    if lowest is None or lowest.n < config.min_sample:
        pooled = _pooled(bin_of(threshold), k, estimates)
        if pooled is None or pooled.n < config.min_sample or pooled.drop_mean <= config.target:
            return None
        return (bin_of(threshold) + 1) * BIN_WIDTH, "tighten-pooled", pooled
    if lowest.drop_mean <= config.target:
        return None
    index = lowest.index
    while _exceeds(estimates.get((index + 1, k)), config):
        index += 1
    return (index + 1) * BIN_WIDTH, "tighten", lowest


def _loosened(
    threshold: float, floor: float, k: int, estimates: Estimates, config: GuardConfig
) -> tuple[float, str, BinEstimate] | None:
    """One bin down, towards the configured threshold, when the lowest bin is well within the target
    and the bin below is not known to be outside it."""
    if threshold <= floor:
        return None
    lowest = estimates.get((bin_of(threshold), k))
    well_within = config.target - config.hysteresis
    if lowest is None or lowest.n < config.min_sample or lowest.drop_mean >= well_within:
        return None
    below = estimates.get((bin_of(threshold) - 1, k))
    if below is not None and below.n >= config.min_sample and below.drop_mean >= well_within:
        return None
    return (bin_of(threshold) - 1) * BIN_WIDTH, "loosen", lowest


def _pooled(lowest: int, k: int, estimates: Estimates) -> BinEstimate | None:
    """Every audit of `k` from bin `lowest` up, as one estimate (at `lowest`); None without any."""
    found = [item for (index, kk), item in estimates.items() if kk == k and index >= lowest]
    n = sum(item.n for item in found)
    if not n:
        return None
    return BinEstimate(lowest, k, n, sum(item.n * item.drop_mean for item in found) / n)


def _exceeds(found: BinEstimate | None, config: GuardConfig) -> bool:
    return found is not None and found.n >= config.min_sample and found.drop_mean > config.target


def _valid(thresholds: list[float]) -> list[float]:
    """Distinct and highest first: a row pushed up to or past the row above it (larger k) pushes that
    row one bin above it. Rows already in order stay where they are, however close (a profiled table's
    rows may lie 0.005 apart)."""
    for index in range(len(thresholds) - 2, -1, -1):
        if thresholds[index] <= thresholds[index + 1]:
            thresholds[index] = round(thresholds[index + 1] + BIN_WIDTH, 6)
    return thresholds
