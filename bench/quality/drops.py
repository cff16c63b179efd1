"""The quality drop of a run: over all requests with a 95% interval, and by (similarity bin, k).

A request's drop is the judged quality of a fresh generation of it (same prompt, seed and steps, cache
off) minus the judged quality of what it was served. A miss is that fresh generation, so its drop is
0; a hit's drop is known only where it was audited (bench.run.replayed). When only a sample of the
hits is audited, the mean over the compared requests would weigh the hits by the sample, not by how
many there were, so the mean over all requests is estimated by stratum (a stratified mean):

    drop_mean = (hits / n) x mean drop of the audited hits + (others / n) x mean drop of the others

over the n judged requests; exact when every hit is audited, unbiased when the audited hits are a
uniform sample of them (the replay draws them at random, AUDIT_SEED).

Interval (`drop_ci95`): a percentile bootstrap, BOOTSTRAP_RESAMPLES resamples from BOOTSTRAP_SEED,
that redraws both what varies: the number of hits (binomial over the n requests) and each stratum's
drops (with replacement). It is the interval of the mean drop a rerun of a like trace would show.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

SIMILARITY_BINS: Final = (0.0, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.01)
"""The profiler's bins (bench.quality.profile.curve), so a live bin and a profiled one are the same bin."""
BOOTSTRAP_RESAMPLES: Final = 2000  # the percentiles 2.5 and 97.5 of 2000 resamples move by < 0.002
BOOTSTRAP_SEED: Final = 0
AUDIT_SEED: Final = 0  # the seed of the uniform draw of audited hits (bench.run.replayed)
INTERVAL_METHOD: Final = "percentile bootstrap, hits and their drops resampled"


@dataclass(frozen=True, slots=True)
class BinDrop:
    """The mean drop of the compared hits of one similarity bin served at one k."""

    similarity_lo: float
    similarity_hi: float
    k: int
    n: int
    drop_mean: float

    def as_json(self) -> dict[str, Any]:
        return {
            "similarity_lo": self.similarity_lo,
            "similarity_hi": self.similarity_hi,
            "k": self.k,
            "n": self.n,
            "drop_mean": round(self.drop_mean, 4),
        }

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> BinDrop:
        return cls(
            similarity_lo=float(row["similarity_lo"]),
            similarity_hi=float(row["similarity_hi"]),
            k=int(row["k"]),
            n=int(row["n"]),
            drop_mean=float(row["drop_mean"]),
        )

    def holds(self, similarity: float, k: int) -> bool:
        """Whether a hit of `similarity` at `k` falls in this bin (the top bin includes 1.0)."""
        inside = self.similarity_lo <= similarity < self.similarity_hi
        return self.k == k and (inside or (similarity >= 1.0 and self.similarity_hi >= 1.0))


@dataclass(frozen=True, slots=True)
class Strata:
    """The judged requests of a run, split in hits and the others, with the drops known in each."""

    hits: int
    others: int
    hit_drops: Sequence[float]
    other_drops: Sequence[float]

    @property
    def judged(self) -> int:
        return self.hits + self.others


def stratified_drop(strata: Strata) -> float | None:
    """The mean drop over all judged requests (module docstring); None when a stratum that has
    requests has no known drop."""
    parts = [
        (count, drops)
        for count, drops in ((strata.hits, strata.hit_drops), (strata.others, strata.other_drops))
        if count
    ]
    if not parts or any(not drops for _, drops in parts):
        return None
    return sum(count * float(np.mean(drops)) for count, drops in parts) / strata.judged


def drop_interval(
    strata: Strata, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float] | None:
    """The 95% percentile-bootstrap interval of `stratified_drop` (module docstring)."""
    if stratified_drop(strata) is None:
        return None
    rng = np.random.default_rng(seed)
    share = rng.binomial(strata.judged, strata.hits / strata.judged, size=resamples) / strata.judged
    estimates = share * _resampled_means(rng, strata.hit_drops, resamples) + (1.0 - share) * (
        _resampled_means(rng, strata.other_drops, resamples)
    )
    low, high = np.percentile(estimates, [2.5, 97.5])
    return float(low), float(high)


def _resampled_means(rng: np.random.Generator, drops: Sequence[float], resamples: int) -> np.ndarray:
    values = np.asarray(drops, dtype=np.float64)
    if values.size == 0 or np.all(values == values[0]):
        return np.full(resamples, values[0] if values.size else 0.0)
    means = np.empty(resamples)
    for index in range(resamples):  # one row at a time: a replay's thousands of misses stay small
        means[index] = values[rng.integers(0, values.size, values.size)].mean()
    return means


def by_bin(hits: Iterable[tuple[float, int, float]]) -> list[BinDrop]:
    """(similarity, k, drop) of compared hits -> their mean drop per (SIMILARITY_BINS bin, k), in
    ascending k then similarity; only bins that hold a hit."""
    grouped: dict[tuple[int, float, float], list[float]] = {}
    for similarity, k, drop in hits:
        for low, high in itertools.pairwise(SIMILARITY_BINS):
            if low <= similarity < high:
                grouped.setdefault((k, low, min(high, 1.0)), []).append(drop)
                break
    return [
        BinDrop(similarity_lo=low, similarity_hi=high, k=k, n=len(drops), drop_mean=float(np.mean(drops)))
        for (k, low, high), drops in sorted(grouped.items())
    ]
