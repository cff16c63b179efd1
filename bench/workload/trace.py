"""Workloads for the benchmark: a prompts file, an arrival process, and the requests they make.

A trace is a prompts file, one prompt per line (the DiffusionDB 5k in bench/data/ by default). An arrival
process says when each request comes:

    closed    a fixed number of clients, each submitting its next request when the last one ends
              (measures the most the system can do, MoDM 6 "Maximum Throughput")
    poisson   exponential gaps at a given rate (MoDM 6 "Modeling of Request Arrivals")
    file      the `arrival_ms` column of an arrivals CSV (`arrival_ms,prompt_idx` per line)

and which prompt each request carries (`PromptOrder`):

    trace       the prompts in file order: keeps the temporal locality of real traffic
    file-index  the arrivals file's random `prompt_idx`: a low-locality workload
                (bench/data/README.md: "Report which one a figure used")

`describe()` of each gives the report's `trace` and `arrivals` fields.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from bench import PROMPTS_5K
from core.errors import TraceError

DEFAULT_PROMPTS = PROMPTS_5K
DEFAULT_CONCURRENCY = 4  # closed-loop clients: MoDM 6 runs 4 GPUs (4x A40); one request in flight per GPU


class ArrivalKind(StrEnum):
    CLOSED = "closed"
    POISSON = "poisson"
    FILE = "file"


class PromptOrder(StrEnum):
    TRACE = "trace"  # prompts in file order: temporal locality kept
    FILE_INDEX = "file-index"  # the arrivals file's random prompt_idx: low locality


LOCALITY = {
    PromptOrder.TRACE: "kept: prompts in trace order",
    PromptOrder.FILE_INDEX: "low: the arrivals file's random prompt_idx",
}


@dataclass(frozen=True, slots=True)
class Prompts:
    """The lines of a prompts file, in order; a line's index is its `prompt_idx`."""

    path: Path
    lines: tuple[str, ...]
    sha256: str

    def __len__(self) -> int:
        return len(self.lines)


@dataclass(frozen=True, slots=True)
class ArrivalRow:
    arrival_ms: float
    prompt_idx: int


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload. `arrival_s` is None under a closed loop (it comes when a client is free)."""

    seq: int
    prompt_idx: int
    prompt: str
    arrival_s: float | None


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    """How requests arrive. `rate_rps` for poisson; `path` for file (and for the file-index order);
    `time_scale` multiplies the file's times (2.0 = half the rate); `concurrency` for closed."""

    kind: ArrivalKind = ArrivalKind.CLOSED
    rate_rps: float | None = None
    path: Path | None = None
    time_scale: float = 1.0
    concurrency: int = DEFAULT_CONCURRENCY
    order: PromptOrder = PromptOrder.TRACE
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind is ArrivalKind.POISSON and (self.rate_rps is None or not self.rate_rps > 0):
            raise TraceError("a poisson arrival process needs a positive rate (--rate, requests per second)")
        if self.kind is ArrivalKind.FILE and self.path is None:
            raise TraceError("file arrivals need an arrivals CSV (--arrivals FILE)")
        if self.order is PromptOrder.FILE_INDEX and self.path is None:
            raise TraceError("the file-index prompt order needs an arrivals CSV (--arrivals FILE)")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise TraceError(f"time_scale must be a positive number, not {self.time_scale}")
        if self.concurrency < 1:
            raise TraceError(f"concurrency must be at least 1, not {self.concurrency}")


@dataclass(frozen=True, slots=True)
class Workload:
    """The requests to send, and where they came from."""

    prompts: Prompts
    spec: ArrivalSpec
    requests: tuple[Request, ...]
    skipped_empty: int

    def describe_trace(self) -> dict[str, Any]:
        """The report's `trace` field."""
        return {
            "path": str(self.prompts.path),
            "sha256": self.prompts.sha256,
            "prompts_in_file": len(self.prompts),
            "requests": len(self.requests),
            "skipped_empty": self.skipped_empty,
            "order": self.spec.order.value,
            "locality": LOCALITY[self.spec.order],
        }

    def describe_arrivals(self) -> dict[str, Any]:
        """The report's `arrivals` field."""
        times = [r.arrival_s for r in self.requests if r.arrival_s is not None]
        span = (max(times) - min(times)) if len(times) > 1 else 0.0
        return {
            "process": self.spec.kind.value,
            "rate_rps": self.spec.rate_rps,
            "concurrency": self.spec.concurrency if self.spec.kind is ArrivalKind.CLOSED else None,
            "path": str(self.spec.path) if self.spec.path is not None else None,
            "time_scale": self.spec.time_scale,
            "seed": self.spec.seed,
            "span_s": round(span, 3),
            "offered_rps": round((len(times) - 1) / span, 4) if span > 0 else None,
        }


def load_prompts(path: Path) -> Prompts:
    """Every line of a UTF-8 prompts file, in order (empty lines kept so indices stay stable)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise TraceError(f"cannot read prompts file {path}: {error.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TraceError(f"prompts file {path} is not UTF-8 (byte {error.start})") from None
    lines = tuple(line.rstrip("\r") for line in text.split("\n"))
    if lines and lines[-1] == "":
        lines = lines[:-1]  # the newline ending the last line
    if not lines:
        raise TraceError(f"prompts file {path} is empty")
    return Prompts(path=path, lines=lines, sha256=hashlib.sha256(data).hexdigest())


def parse_arrivals(text: str, *, source: str = "<arrivals>") -> list[ArrivalRow]:
    """Rows of an `arrival_ms,prompt_idx` CSV. A first line that is not numeric is taken as a header;
    blank lines are skipped; times must be finite and non-negative. Rows come back in time order."""
    rows: list[ArrivalRow] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 2:
            raise TraceError(f"{source}:{number}: expected 'arrival_ms,prompt_idx', got {line!r}")
        try:
            arrival_ms, index = float(parts[0]), int(float(parts[1]))
        except ValueError:
            if not rows and number == 1:
                continue  # a header
            raise TraceError(
                f"{source}:{number}: expected numbers 'arrival_ms,prompt_idx', got {line!r}"
            ) from None
        if not math.isfinite(arrival_ms) or arrival_ms < 0:
            raise TraceError(f"{source}:{number}: arrival_ms {parts[0]} must be a non-negative number")
        if index < 0:
            raise TraceError(f"{source}:{number}: prompt_idx {parts[1]} must not be negative")
        rows.append(ArrivalRow(arrival_ms=arrival_ms, prompt_idx=index))
    if not rows:
        raise TraceError(f"{source}: no arrivals")
    # The shared Azure-shaped files list ~3% of rows slightly out of order: sort (stably) by time.
    return sorted(rows, key=lambda row: row.arrival_ms)


def load_arrivals(path: Path) -> list[ArrivalRow]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TraceError(f"cannot read arrivals file {path}: {error.strerror}") from None
    return parse_arrivals(text, source=str(path))


def poisson_times(count: int, *, rate_rps: float, seed: int) -> list[float]:
    """`count` arrival times in seconds of a Poisson process, the first at 0."""
    if count <= 0:
        return []
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_rps, size=count - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def build_workload(prompts: Prompts, spec: ArrivalSpec, *, limit: int | None = None) -> Workload:
    """The requests of `prompts` under `spec`, at most `limit` of them.

    Empty prompts are left out (the API refuses them) and counted in `skipped_empty`;
    the request sequence is renumbered, prompt indices are kept.
    """
    rows = load_arrivals(spec.path) if spec.path is not None else None
    pairs = _prompt_indices_and_times(len(prompts), spec, rows)
    if limit is not None:
        if limit < 0:
            raise TraceError(f"limit must not be negative, not {limit}")
        pairs = pairs[:limit]
    requests: list[Request] = []
    skipped = 0
    for index, arrival_s in pairs:
        prompt = prompts.lines[index]
        if not prompt.strip():
            skipped += 1
            continue
        requests.append(Request(seq=len(requests), prompt_idx=index, prompt=prompt, arrival_s=arrival_s))
    return Workload(prompts=prompts, spec=spec, requests=tuple(requests), skipped_empty=skipped)


def _prompt_indices_and_times(
    size: int, spec: ArrivalSpec, rows: Sequence[ArrivalRow] | None
) -> list[tuple[int, float | None]]:
    if spec.order is PromptOrder.FILE_INDEX:
        assert rows is not None  # checked by ArrivalSpec
        for row in rows:
            if row.prompt_idx >= size:
                raise TraceError(f"prompt_idx {row.prompt_idx} is beyond the {size} prompts of the trace")
        indices = [row.prompt_idx for row in rows]
    else:
        indices = list(
            range(size if rows is None or spec.kind is not ArrivalKind.FILE else min(size, len(rows)))
        )
    times: list[float | None]
    if spec.kind is ArrivalKind.CLOSED:
        times = [None] * len(indices)
    elif spec.kind is ArrivalKind.POISSON:
        assert spec.rate_rps is not None
        times = list(poisson_times(len(indices), rate_rps=spec.rate_rps, seed=spec.seed))
    else:
        assert rows is not None
        start = rows[0].arrival_ms
        times = [(row.arrival_ms - start) / 1000.0 * spec.time_scale for row in rows[: len(indices)]]
    return list(zip(indices, times, strict=True))
