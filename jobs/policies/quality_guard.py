"""The quality guard: NIRVANA's threshold table (Algorithm 1), held to a quality target online. Pure.

NIRVANA profiles once, offline, the lowest similarity at which each K keeps quality within its
tolerance (Algorithm 1, Eq. 10) and serves from that table ever after. The guard keeps asking the same
question while serving: audits (a hit against a fresh generation of the same request) give a running
estimate of the drop per (similarity bin, k), and each row's threshold moves with it:

- Tighten, in one step: NIRVANA's Algorithm 1 keeps, for each K, the lowest similarity above which
  every profiled image is within the tolerance. When a row's audits from its threshold up are known to
  exceed the target, the guard moves it just above the highest bin from which they still are, so that
  from its new threshold up no bin starts hits known to lose. From a bin up the audits are read two
  ways: the lowest hits (the bins from there up that first gather `min_sample` audits: one bin's own,
  `tighten`, several pooled, `tighten-pooled`) and all the hits (every audit of the k from there up,
  `tighten-pooled`). The lowest hits are the likeliest to lose, and judged alone they cannot hide
  behind the gains of exact matches above them (measured live on the retrained lab: a row pooled over
  all its hits stopped at 0.675 with the hits from 0.675 to 0.85 losing 0.10 to 0.16); all the hits
  catch losses spread thin. Audits below the threshold stay evidence, and the move takes one pass, not
  a bin a pass (quality first).
- Loosen, with hysteresis: a row above its configured threshold comes down one bin when its lowest
  bin's own estimate is below target - hysteresis and, from the bin it would admit again, its audits
  are not known to be above that either (so a loosened row is never tightened straight back; a bin
  once tightened away keeps its audits, see WINDOW).
- Known: an estimate is known to exceed the target (or to be below it) when it rests on at least
  `min_sample` audits and its mean is ERRORS standard errors past it; otherwise nothing moves.
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
from dataclasses import dataclass, replace

from jobs.policies.k_selection import ThresholdRow, ThresholdTable

BIN_WIDTH = 0.025
"""Width of a similarity bin, and the step of a threshold. A quarter of NIRVANA's smallest row spacing
(0.05, Figure 10): fine enough to move a row less than the distance to its neighbour, wide enough that
a bin gathers its minimum sample within one replay of a few hundred requests."""
ERRORS = 1.0
"""How many standard errors past the target an estimate must be to move a row (up when above it, down
when below the target less the hysteresis). One, measured in closed loop on the lab profile's pairs
(tests/jobs/test_quality_guard_closed_loop.py, 80 runs of 600 requests from `0.5:25`): at 0 errors the
noise of 16 audits of exact matches, which gain nothing, pushed a row to the top of the table in 3 to
4 runs, where no hit is served and so no audit can bring it down again; at 1, in none, and 79 of the
80 second halves were within the target; at 1.5, as many within it with rows slower to move. The
losses the guard exists for (0.1 and more) stand several errors clear."""
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
    """The drop estimate of one (similarity bin, k): the mean of its newest audits, and of their squares
    (for the estimate's standard error, and to pool bins)."""

    index: int  # the bin [index x BIN_WIDTH, (index + 1) x BIN_WIDTH)
    k: int
    n: int
    drop_mean: float
    drop_square_mean: float

    @property
    def standard_error(self) -> float:
        """The standard error of drop_mean: the audits' sample deviation over sqrt(n); 0 for one audit."""
        if self.n < 2:
            return 0.0
        return math.sqrt(max(self.drop_square_mean - self.drop_mean**2, 0.0) / (self.n - 1))

    def exceeds(self, target: float, min_sample: int) -> bool:
        """Known to exceed `target`: at least `min_sample` audits, their mean ERRORS errors above it."""
        return self.n >= min_sample and self.drop_mean - ERRORS * self.standard_error > target

    def within(self, target: float, min_sample: int) -> bool:
        """Known to be below `target`: at least `min_sample` audits, their mean ERRORS errors below it."""
        return self.n >= min_sample and self.drop_mean + ERRORS * self.standard_error < target

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
        key: BinEstimate(
            key[0], key[1], len(drops), sum(drops) / len(drops), sum(d * d for d in drops) / len(drops)
        )
        for key, drops in kept.items()
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
    """Just above the highest bin, from the threshold's up, where the row's audits are known to exceed
    the target (the caller applies the ceiling), with what exceeded at the threshold's own bin; None
    when they are not known to there."""
    index = bin_of(threshold)
    cause = _exceeding(index, k, estimates, config)
    if cause is None:
        return None
    return (_highest_exceeding(index, k, estimates, config) + 1) * BIN_WIDTH, *cause


def _highest_exceeding(index: int, k: int, estimates: Estimates, config: GuardConfig) -> int:
    """The highest bin from `index` up at which the audits of `k` are known to exceed the target, or
    index - 1 when none is (NIRVANA's Algorithm 1: the threshold is where every image above it holds)."""
    top = max((bin_index for bin_index, kk in estimates if kk == k), default=index - 1)
    return max(
        (at for at in range(index, top + 1) if _exceeding(at, k, estimates, config) is not None),
        default=index - 1,
    )


def _exceeding(
    index: int, k: int, estimates: Estimates, config: GuardConfig
) -> tuple[str, BinEstimate] | None:
    """Why a row of `k` with its threshold in bin `index` is known to exceed the target: its lowest hits
    (`tighten` for one bin, `tighten-pooled` for several) or all its hits from there up; None when
    neither is known to."""
    lowest = _lowest_hits(index, k, estimates, config.min_sample)
    if lowest is not None and lowest[1].exceeds(config.target, config.min_sample):
        return lowest
    every = _pooled(index, k, estimates)
    if every is not None and every.exceeds(config.target, config.min_sample):
        return "tighten-pooled", every
    return None


def _loosened(
    threshold: float, floor: float, k: int, estimates: Estimates, config: GuardConfig
) -> tuple[float, str, BinEstimate] | None:
    """One bin down, towards the configured threshold, when the lowest bin is well within the target
    and, from the bin below up, the audits are not known to be outside it."""
    if threshold <= floor:
        return None
    lowest = estimates.get((bin_of(threshold), k))
    well_within = replace(config, target=config.target - config.hysteresis)
    if lowest is None or not lowest.within(well_within.target, config.min_sample):
        return None
    if _highest_exceeding(bin_of(threshold) - 1, k, estimates, well_within) >= bin_of(threshold) - 1:
        return None
    return (bin_of(threshold) - 1) * BIN_WIDTH, "loosen", lowest


def _lowest_hits(index: int, k: int, estimates: Estimates, min_sample: int) -> tuple[str, BinEstimate] | None:
    """The lowest `min_sample` audits of `k` from bin `index` up (all of them when fewer; of the last bin
    reached, as many as it takes, at its mean), as one estimate at `index`: `tighten` when bin `index`
    holds them all, `tighten-pooled` otherwise; None without any."""
    found = sorted(
        (item for (bin_index, kk), item in estimates.items() if kk == k and bin_index >= index),
        key=lambda item: item.index,
    )
    taken: list[tuple[int, BinEstimate]] = []
    wanted = min_sample
    for item in found:
        taken.append((min(item.n, wanted), item))
        wanted -= taken[-1][0]
        if not wanted:
            break
    if not taken:
        return None
    reason = "tighten" if len(taken) == 1 and found[0].index == index else "tighten-pooled"
    return reason, _combined(index, k, taken)


def _pooled(lowest: int, k: int, estimates: Estimates) -> BinEstimate | None:
    """Every audit of `k` from bin `lowest` up, as one estimate (at `lowest`); None without any."""
    found = [(item.n, item) for (index, kk), item in estimates.items() if kk == k and index >= lowest]
    return _combined(lowest, k, found) if found else None


def _combined(index: int, k: int, parts: list[tuple[int, BinEstimate]]) -> BinEstimate:
    """`count` audits of each estimate, taken at its means, as one estimate at bin `index`."""
    n = sum(count for count, _ in parts)
    mean = sum(count * item.drop_mean for count, item in parts) / n
    square = sum(count * item.drop_square_mean for count, item in parts) / n
    return BinEstimate(index, k, n, mean, square)


def _valid(thresholds: list[float]) -> list[float]:
    """Distinct and highest first: a row pushed up to or past the row above it (larger k) pushes that
    row one bin above it. Rows already in order stay where they are, however close (a profiled table's
    rows may lie 0.005 apart)."""
    for index in range(len(thresholds) - 2, -1, -1):
        if thresholds[index] <= thresholds[index + 1]:
            thresholds[index] = round(thresholds[index + 1] + BIN_WIDTH, 6)
    return thresholds
