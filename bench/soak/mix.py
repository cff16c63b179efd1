"""The soak's pure part: the request mix, what an error is, p99 per minute and the memory summary."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Op(StrEnum):
    IMAGE_CACHED = "image-cached"  # a generation with the cache on, its prompt drawn from a small pool
    IMAGE_UNCACHED = "image-uncached"  # "cache": "off": always a full generation
    VIDEO = "video"  # a short video job (few frames)
    READ = "read"  # GET .../image of a finished image job
    POLL = "poll"  # GET a job
    CANCEL = "cancel"  # a generation submitted and at once canceled


SUBMITS = frozenset({Op.IMAGE_CACHED, Op.IMAGE_UNCACHED, Op.VIDEO, Op.CANCEL})
# Of every 100 requests: mostly submissions that repeat earlier prompts (hits) or not, reads of what
# finished, polls, a few cancels and videos. Moderate: the generations in flight are capped (Mix).
WEIGHTS: Mapping[Op, float] = {
    Op.IMAGE_CACHED: 30,
    Op.IMAGE_UNCACHED: 12,
    Op.VIDEO: 3,
    Op.READ: 30,
    Op.POLL: 18,
    Op.CANCEL: 7,
}
# The prompt pool of cached submissions: small enough that prompts repeat (hits), varied by a seed.
SUBJECTS = ("a lighthouse", "a red fox", "a teapot", "a sailboat", "a castle", "an owl", "a bicycle")
PLACES = ("on a cliff", "in a forest", "at dusk", "in the snow", "on a beach", "in a city")


@dataclass(frozen=True)
class Mix:
    max_inflight: int  # generations submitted and not yet ended; at the cap, a submission becomes a read
    video: bool  # whether the stack serves video jobs


def choose(rng: random.Random, mix: Mix, *, inflight: int, finished_images: int) -> Op:
    """The next request: drawn from WEIGHTS; a submission past the in-flight cap, or a read or poll with
    nothing to read yet, becomes the nearest thing that can be sent."""
    ops = [op for op in WEIGHTS if mix.video or op is not Op.VIDEO]
    op = rng.choices(ops, weights=[WEIGHTS[op] for op in ops])[0]
    if op in SUBMITS and inflight >= mix.max_inflight:
        op = Op.READ
    if op in (Op.READ, Op.POLL) and finished_images == 0:
        op = Op.IMAGE_CACHED if inflight < mix.max_inflight else Op.POLL
    return op


def prompt(rng: random.Random, op: Op, serial: int) -> str:
    """A cached submission repeats the pool's prompts; the others are new each time."""
    if op is Op.IMAGE_CACHED:
        return f"{rng.choice(SUBJECTS)} {rng.choice(PLACES)}, oil painting"
    return f"soak {serial}: {rng.choice(SUBJECTS)} {rng.choice(PLACES)}"


def is_error(op: Op, status: int | None) -> bool:
    """A transport failure or a 5xx is an error; so is a 4xx, but for a read of an image that is gone
    or not decodable (404, 409, 410) and a cancel of a job that already ended (409)."""
    if status is None or status >= 500:
        return True
    if status < 400:
        return False
    if op is Op.READ:
        return status not in (404, 409, 410)
    if op is Op.CANCEL:
        return status != 409
    return True


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def p99_by_minute(samples: Sequence[tuple[float, float]], *, minutes: int) -> list[float | None]:
    """p99 of the latencies (ms) per minute of the run; samples are (seconds since start, ms)."""
    buckets: list[list[float]] = [[] for _ in range(minutes)]
    for at, ms in samples:
        buckets[min(minutes - 1, max(0, int(at // 60)))].append(ms)
    return [None if p is None else round(p, 1) for p in (percentile(b, 0.99) for b in buckets)]


@dataclass(frozen=True)
class Memory:
    start: float
    end: float
    max: float
    after_warmup: float  # the first sample at or after the warm-up
    growth_after_warmup: float  # end / after_warmup - 1

    def contract(self) -> dict[str, float]:
        return {"start": self.start, "end": self.end, "max": self.max}


def memory_summary(samples: Sequence[tuple[float, float]], *, warmup_s: float) -> Memory | None:
    """start, end and max RSS (MiB) of one process from its (seconds, MiB) samples, and its growth from
    the first sample after `warmup_s` to the end (the soak's bar: no process grows by more than 20%
    after its first five minutes)."""
    if not samples:
        return None
    values = [mb for _, mb in samples]
    settled = next((mb for at, mb in samples if at >= warmup_s), values[-1])
    growth = values[-1] / settled - 1 if settled > 0 else 0.0
    return Memory(
        start=round(values[0], 1),
        end=round(values[-1], 1),
        max=round(max(values), 1),
        after_warmup=round(settled, 1),
        growth_after_warmup=round(growth, 4),
    )
