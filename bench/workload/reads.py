"""A skewed, decaying read workload in the shape of LatentBox's production trace (section 3.1.1).

The paper's trace (2.07 B views of 92.3 M images over 35 months) is not public; this generator keeps
the four properties the design rests on, each tied to one parameter:

- O1, heavy skew. Each object has a lifetime popularity weight rank^-zipf, with zipf = 1.11 (the
  trace's fitted exponent) and ranks a random permutation of the objects, so popularity is independent
  of birth order. The paper's trace gives its top 1% of images 39% of views and its top 10% 71%;
  `trace_statistics` measures the same shares here. At 150 K objects and 1 M reads Zipf 1.11 is more
  skewed than that (top 1%: about 75%); zipf = 0.9 lands near the paper's shares (47% and 72%).
- O2, fast post-birth decay. An object's read rate falls with its age (reads since its birth) as
  (1 + age / a0)^-1. The paper sees even the top 1% of images fall more than 100x within a year, about
  a third of its 35-month trace; here a0 makes the rate fall `decay_drop` (100x) over `decay_span`
  (half) of the trace: 1 + span / a0 = drop.
- O4, a long re-access tail. The power law never reaches zero (its integral grows like log age), so old
  objects keep being read now and then: the paper finds 32% of re-accesses more than a day apart.
- New content keeps arriving (O2's "continual arrival of new images"): `initial_share` (10%) of the
  objects exist when the trace starts, the rest are born at evenly spread reads of it. No object is
  read before its birth.

Sampling is chunked: the weights (popularity x decay, zero before birth) are recomputed once per chunk
of at most CHUNK reads, and at least CHUNKS times per trace, then the chunk's reads are drawn from them.
Ages move little within a chunk, and 150 K objects x 2 M reads take about a second. Pure: no I/O; one
seed gives one trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

ZIPF = 1.11  # O1: the fitted Zipf exponent of image popularity
INITIAL_SHARE = 0.10  # our own: objects alive when the trace starts; the rest are born during it
DECAY_DROP = 100.0  # O2: "access rate drop by over 100x within a year"
DECAY_SPAN = 0.5  # the share of the trace over which the rate falls DECAY_DROP-fold
CHUNK = 1000  # reads drawn per weight update, at most
CHUNKS = 200  # weight updates per trace, at least (a short trace uses shorter chunks)
# O1's figures, to set beside what `trace_statistics` measures.
PAPER_TOP_1PCT_SHARE = 0.39
PAPER_TOP_10PCT_SHARE = 0.71
PAPER_READ_ONCE_SHARE = 0.15
PAPER_UNDER_TEN_SHARE = 0.69


@dataclass(frozen=True, slots=True)
class ReadTraceSpec:
    """One read trace.

    objects: distinct images (the paper's replay: 150 K); reads: the trace's length; zipf: O1's
    popularity exponent; initial_share: the objects born before the first read; decay_drop and
    decay_span: O2's law, the rate falls decay_drop-fold over decay_span of the trace; seed: the draw.
    """

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
        if not 0.0 < self.initial_share <= 1.0:
            raise ValueError(f"the initial share must be in (0, 1], got {self.initial_share}")
        if self.decay_span <= 0 or self.decay_drop <= 1.0:
            raise ValueError("the decay needs a positive span and a drop above 1")


def decay_scale(spec: ReadTraceSpec) -> float:
    """a0, in reads: the age at which an object's read rate has halved, (1 + span / a0) = drop."""
    return spec.decay_span * spec.reads / (spec.decay_drop - 1.0)


def births(spec: ReadTraceSpec) -> npt.NDArray[np.float64]:
    """The read index at which each object appears: the first `initial_share` at 0, the rest evenly
    spread over the trace (object i is born no later than object i + 1)."""
    initial = min(spec.objects, max(1, round(spec.objects * spec.initial_share)))
    later = np.linspace(0, spec.reads, spec.objects - initial + 1, endpoint=False)[1:]
    return np.concatenate([np.zeros(initial), later])


def popularity(spec: ReadTraceSpec) -> npt.NDArray[np.float64]:
    """Each object's lifetime weight rank^-zipf (O1), ranks a seeded random permutation."""
    ranks = np.random.default_rng(spec.seed).permutation(spec.objects) + 1
    weights: npt.NDArray[np.float64] = ranks.astype(np.float64) ** -spec.zipf
    return weights


def read_trace(spec: ReadTraceSpec) -> npt.NDArray[np.int64]:
    """`spec.reads` object indices in read order, each of an object born by then."""
    rng = np.random.default_rng([spec.seed, 1])
    weight = popularity(spec)
    born = births(spec)
    a0 = decay_scale(spec)
    out = np.empty(spec.reads, dtype=np.int64)
    chunk = max(1, min(CHUNK, spec.reads // CHUNKS))
    for start in range(0, spec.reads, chunk):
        stop = min(spec.reads, start + chunk)
        alive = int(np.searchsorted(born, start, side="right"))  # births are in index order
        ages = (start + stop) / 2 - born[:alive]
        cumulative = np.cumsum(weight[:alive] / (1.0 + ages / a0))
        draws = rng.random(stop - start) * cumulative[-1]
        picked = np.searchsorted(cumulative, draws, side="right")
        out[start:stop] = np.minimum(picked, alive - 1)
    return out


def read_ages(spec: ReadTraceSpec, trace: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Each read's age: reads since the birth of the object it reads (O2, O4)."""
    ages: npt.NDArray[np.float64] = np.arange(len(trace)) - births(spec)[trace]
    return ages


def trace_statistics(trace: npt.NDArray[np.int64], objects: int) -> dict[str, float]:
    """The trace's skew, in O1's terms: the share of reads that go to the top 1% and top 10% of the
    objects (paper: 39% and 71%), and among the objects read at all, the share read exactly once (15%)
    and fewer than ten times (69%)."""
    counts = np.sort(np.bincount(trace, minlength=objects))[::-1]
    total = max(1, int(counts.sum()))
    read = counts[counts > 0]
    seen = max(1, read.size)
    return {
        "top_1pct_share": round(float(counts[: max(1, objects // 100)].sum() / total), 4),
        "top_10pct_share": round(float(counts[: max(1, objects // 10)].sum() / total), 4),
        "objects_read": int(read.size),
        "read_once_share": round(float((read == 1).sum() / seen), 4),
        "under_ten_share": round(float((read < 10).sum() / seen), 4),
    }
