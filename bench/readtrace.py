"""A skewed, decaying read workload in the shape of LatentBox's production trace (section 3.1.1).

- O1, heavy skew: each object's lifetime popularity is Zipf-like, weight rank^-zipf with zipf = 1.11
  (the trace's fitted exponent), ranks a random permutation of the objects.
- O2, fast post-birth decay: an object's read rate falls with its age as (1 + age / a0)^-1, so a
  hot object is hot for a phase, not forever; a0 makes the rate fall 100x over half the trace.
- O4, a long re-access tail: the power-law decay never reaches zero, so old objects are still read
  now and then (the paper: 32% of re-accesses come after more than a day).
- New content keeps arriving (O2): 10% of the objects exist when the trace starts, the rest are born
  at evenly spread points of it; no object is read before its birth.

Reads are drawn in chunks: the weights are recomputed at least CHUNKS times per trace and at least every
CHUNK reads (ages move little within one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

ZIPF = 1.11  # O1
INITIAL_SHARE = 0.10  # objects alive when the trace starts; the rest are born during it
DECAY_SPAN = 0.5  # the read rate of an object falls DECAY_DROP-fold over this share of the trace
DECAY_DROP = 100.0  # O2: "drop by over 100x within a year" (a year ~ a third of the 35-month trace)
CHUNK = 1000  # reads per weight update at most; at least CHUNKS updates per trace
CHUNKS = 200


@dataclass(frozen=True, slots=True)
class ReadTraceSpec:
    """objects: distinct images; reads: trace length; zipf: the popularity exponent; seed: the draw."""

    objects: int
    reads: int
    zipf: float = ZIPF
    initial_share: float = INITIAL_SHARE
    decay_span: float = DECAY_SPAN
    decay_drop: float = DECAY_DROP
    seed: int = 0

    def __post_init__(self) -> None:
        if self.objects < 1 or self.reads < 1:
            raise ValueError("a read trace needs at least one object and one read")
        if self.zipf < 0:
            raise ValueError(f"the Zipf exponent must be at least 0, got {self.zipf}")


def births(spec: ReadTraceSpec) -> npt.NDArray[np.float64]:
    """The read index at which each object appears (object i is born no later than object i+1)."""
    initial = max(1, round(spec.objects * spec.initial_share))
    later = np.linspace(0, spec.reads, max(0, spec.objects - initial), endpoint=False)
    return np.concatenate([np.zeros(min(initial, spec.objects)), later])


def read_trace(spec: ReadTraceSpec) -> npt.NDArray[np.int64]:
    """`spec.reads` object indices, each read of an object born by then."""
    rng = np.random.default_rng(spec.seed)
    ranks = rng.permutation(spec.objects) + 1
    popularity = ranks.astype(np.float64) ** -spec.zipf
    born = births(spec)
    a0 = spec.decay_span * spec.reads / (spec.decay_drop - 1.0)  # (1 + span/a0) = drop
    out = np.empty(spec.reads, dtype=np.int64)
    chunk = max(1, min(CHUNK, spec.reads // CHUNKS))
    for start in range(0, spec.reads, chunk):
        stop = min(spec.reads, start + chunk)
        now = (start + stop) / 2
        alive = born <= start
        weights = np.where(alive, popularity / (1.0 + np.maximum(now - born, 0.0) / a0), 0.0)
        out[start:stop] = rng.choice(spec.objects, size=stop - start, p=weights / weights.sum())
    return out


def trace_statistics(trace: npt.NDArray[np.int64], objects: int) -> dict[str, float]:
    """The trace's skew, to set beside the paper's O1 (top 1% of images: 39% of views; top 10%: 71%;
    15% of images read once)."""
    counts = np.sort(np.bincount(trace, minlength=objects))[::-1]
    total = max(1, int(counts.sum()))
    read = counts[counts > 0]
    return {
        "top_1pct_share": round(float(counts[: max(1, objects // 100)].sum() / total), 4),
        "top_10pct_share": round(float(counts[: max(1, objects // 10)].sum() / total), 4),
        "objects_read": int(read.size),
        "read_once_share": round(float((read == 1).sum() / max(1, read.size)), 4),
    }
