"""The benchmark's result object, and its JSON and markdown forms.

`BenchReport` carries exactly the contract fields of `reprise bench replay|simulate --json`:

    profile, requests, hit_rate, k_histogram (k -> count), compute_saved, throughput_rps,
    vanilla_throughput_rps, latency_ms {p50, p95, p99}, slo_violations {x2, x4},
    admission_ms {p50, p99}, entry_bytes, png_bytes, embedder, trace, arrivals,
    decodes {per_job, per_read, jobs, generation_decodes, reads, read_decodes} (null when not measured,
    as in a simulation), quality {hit_mean, hit_p5, miss_mean, drop_mean, hit_drop_mean, drop_ci95,
    judged, compared, audited, by_bin [{similarity_lo, similarity_hi, k, n, drop_mean}], source} (the
    judge's scores and the drop, bench.quality.drops; null where nothing could be judged)

A sweep (`simulate --sweep`) writes a JSON list of `SweepPoint`s: a report's fields plus
`cache_bytes` and `policy`. A replay's JSON adds `stack` (what the stack ran: bench.live.stack), a
simulation's `allocation_timeline` when its pools moved (bench.sim.monitor). Figures are in bench.run.plots.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.quality.drops import BinDrop

REPORT_FIELDS = (
    "profile",
    "requests",
    "hit_rate",
    "k_histogram",
    "compute_saved",
    "throughput_rps",
    "vanilla_throughput_rps",
    "latency_ms",
    "slo_violations",
    "admission_ms",
    "entry_bytes",
    "png_bytes",
    "embedder",
    "trace",
    "arrivals",
    "decodes",
    "quality",
    "escalation_rate",
    "threshold_timeline",
    "costlier_hits",
    "step_costs",
)
SWEEP_FIELDS = (*REPORT_FIELDS, "cache_bytes", "policy")


@dataclass(frozen=True, slots=True)
class Latency:
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class SloViolations:
    """Fractions of requests slower than 2x and 4x the large model's full-generation latency (MoDM 6),
    and, where a run has one, slower than its own SLO (`slo_s`: a DiffServe pair's, 4.1)."""

    x2: float | None
    x4: float | None
    slo_s: float | None = None
    at_slo: float | None = None

    def as_json(self) -> dict[str, float | None]:
        body = {"x2": _round(self.x2), "x4": _round(self.x4)}
        if self.slo_s is not None:
            body.update(slo_s=self.slo_s, at_slo=_round(self.at_slo))
        return body


@dataclass(frozen=True, slots=True)
class AdmissionLatency:
    """Admission overhead per request; `stages` breaks it down (embed, predict, lookup -> p50, p99)."""

    p50: float | None
    p99: float | None
    stages: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decodes:
    """VAE decodes (LatentBox 4.1): at generation, per succeeded job (from each job's metrics), and on
    read, per image read (the stack's /v1/stats counters over the replay's window)."""

    jobs: int
    generation_decodes: int
    reads: int | None
    read_decodes: int | None

    @property
    def per_job(self) -> float | None:
        return self.generation_decodes / self.jobs if self.jobs else None

    @property
    def per_read(self) -> float | None:
        return self.read_decodes / self.reads if self.reads and self.read_decodes is not None else None

    def as_json(self) -> dict[str, Any]:
        return {
            "per_job": _round(self.per_job),
            "per_read": _round(self.per_read),
            "jobs": self.jobs,
            "generation_decodes": self.generation_decodes,
            "reads": self.reads,
            "read_decodes": self.read_decodes,
        }


@dataclass(frozen=True, slots=True)
class Quality:
    """The judge's quality of results (bench.quality): mean and 5th percentile over hits, mean over misses,
    and the drop against a fresh generation of the same prompt and seed: `drop_mean` over all judged
    requests (a miss run by the full model alone is its own fresh generation: drop 0; the requests
    served with less (hits, the cascade's kept light images, runs with the step cache) weighed by their
    count, estimated from the compared ones: bench.quality.drops), `by_stratum` each such stratum's
    count, compared and mean drop, with `drop_ci95` its 95% bootstrap interval (None
    where nothing was sampled: a simulation's profile), `hit_drop_mean` over compared hits, `audited`
    the hits compared with a fresh generation, `by_bin` the compared hits' drop per (similarity bin, k).
    `source` says how it was obtained (judged images, a sample of fresh generations, or a profile)."""

    hit_mean: float | None
    hit_p5: float | None
    miss_mean: float | None
    drop_mean: float | None
    hit_drop_mean: float | None
    judged: int
    compared: int
    source: str
    drop_ci95: tuple[float, float] | None = None
    audited: int = 0
    by_bin: tuple[BinDrop, ...] = ()
    by_stratum: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # bench.run.outcomes.Served

    def as_json(self) -> dict[str, Any]:
        return {
            "hit_mean": _round(self.hit_mean),
            "hit_p5": _round(self.hit_p5),
            "miss_mean": _round(self.miss_mean),
            "drop_mean": _round(self.drop_mean),
            "hit_drop_mean": _round(self.hit_drop_mean),
            "drop_ci95": None if self.drop_ci95 is None else [_round(bound) for bound in self.drop_ci95],
            "judged": self.judged,
            "compared": self.compared,
            "audited": self.audited,
            "by_bin": [row.as_json() for row in self.by_bin],
            "by_stratum": {
                name: {**row, "drop_mean": _round(row.get("drop_mean"))}
                for name, row in self.by_stratum.items()
            },
            "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class BenchReport:
    """One run. Fractions are in [0, 1]; None where a quantity was not measured (e.g. no request
    succeeded, or the API does not expose admission time). k_histogram counts hits per k."""

    profile: str
    requests: int
    hit_rate: float | None
    k_histogram: Mapping[int, int]
    compute_saved: float | None
    throughput_rps: float | None
    vanilla_throughput_rps: float | None
    latency_ms: Latency
    slo_violations: SloViolations
    admission_ms: AdmissionLatency
    entry_bytes: float | None
    png_bytes: float | None
    embedder: Mapping[str, Any]
    trace: Mapping[str, Any]
    arrivals: Mapping[str, Any]
    decodes: Decodes | None = None
    quality: Quality | None = None
    escalation_rate: float | None = None  # DiffServe's cascade: light stages escalated to the heavy model
    threshold_timeline: tuple[Mapping[str, float], ...] | None = None  # [{t, threshold, light, heavy}]
    costlier_hits: int | None = None  # hits served light-first: the miss route cost less (cascade)
    step_costs: Mapping[str, Any] | None = (
        None  # {large_step_ms, small_step_ms, source}: compute_saved's weights
    )

    def as_json(self) -> dict[str, Any]:
        """The contract fields as JSON types (k_histogram keys become strings, in ascending k)."""
        return {
            "profile": self.profile,
            "requests": self.requests,
            "hit_rate": _round(self.hit_rate),
            "k_histogram": {str(k): self.k_histogram[k] for k in sorted(self.k_histogram)},
            "compute_saved": _round(self.compute_saved),
            "throughput_rps": _round(self.throughput_rps),
            "vanilla_throughput_rps": _round(self.vanilla_throughput_rps),
            "latency_ms": {
                "p50": _round(self.latency_ms.p50, 1),
                "p95": _round(self.latency_ms.p95, 1),
                "p99": _round(self.latency_ms.p99, 1),
            },
            "slo_violations": self.slo_violations.as_json(),
            "admission_ms": {
                "p50": _round(self.admission_ms.p50, 3),
                "p99": _round(self.admission_ms.p99, 3),
                "stages": {
                    stage: {"p50": _round(p50, 3), "p99": _round(p99, 3)}
                    for stage, (p50, p99) in sorted(self.admission_ms.stages.items())
                },
            },
            "entry_bytes": _round(self.entry_bytes, 0),
            "png_bytes": _round(self.png_bytes, 0),
            "embedder": dict(self.embedder),
            "trace": dict(self.trace),
            "arrivals": dict(self.arrivals),
            "decodes": None if self.decodes is None else self.decodes.as_json(),
            "quality": None if self.quality is None else self.quality.as_json(),
            "escalation_rate": _round(self.escalation_rate),
            "threshold_timeline": None
            if self.threshold_timeline is None
            else [dict(p) for p in self.threshold_timeline],
            "costlier_hits": self.costlier_hits,
            "step_costs": None if self.step_costs is None else dict(self.step_costs),
        }


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One point of a sweep: a run at one cache budget and eviction policy."""

    report: BenchReport
    cache_bytes: int
    policy: str

    def as_json(self) -> dict[str, Any]:
        return {**self.report.as_json(), "cache_bytes": self.cache_bytes, "policy": self.policy}


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def write_json(path: Path, data: BenchReport | Sequence[BenchReport | SweepPoint]) -> None:
    """One report as an object, or several (a sweep) as a list, indented, ending with a newline."""
    payload: Any = data.as_json() if isinstance(data, BenchReport) else [item.as_json() for item in data]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _k_text(histogram: Mapping[int, int]) -> str:
    return " ".join(f"{k}:{histogram[k]}" for k in sorted(histogram)) or "-"


def markdown_table(rows: Sequence[BenchReport | SweepPoint]) -> str:
    """A markdown table, one line per run: the headline numbers of each."""
    header = (
        "| profile | policy | cache | requests | hit rate | compute saved | k histogram | thr. rps "
        "| vanilla rps | p50 ms | p95 ms | p99 ms | SLO x2 | SLO x4 | SLO | escalated | quality | drop |"
    )
    lines = [header, "|" + "---|" * 18]
    for row in rows:
        report = row.report if isinstance(row, SweepPoint) else row
        policy = row.policy if isinstance(row, SweepPoint) else "-"
        cache = _bytes_text(row.cache_bytes) if isinstance(row, SweepPoint) else "-"
        lines.append(
            f"| {report.profile} | {policy} | {cache} | {report.requests} | {_fmt(report.hit_rate, '.3f')} "
            f"| {_fmt(report.compute_saved, '.3f')} | {_k_text(report.k_histogram)} "
            f"| {_fmt(report.throughput_rps, '.3f')} | {_fmt(report.vanilla_throughput_rps, '.3f')} "
            f"| {_fmt(report.latency_ms.p50, '.0f')} | {_fmt(report.latency_ms.p95, '.0f')} "
            f"| {_fmt(report.latency_ms.p99, '.0f')} | {_fmt(report.slo_violations.x2, '.3f')} "
            f"| {_fmt(report.slo_violations.x4, '.3f')} | {_fmt(report.slo_violations.at_slo, '.3f')} "
            f"| {_fmt(report.escalation_rate, '.3f')} | {_fmt(_mean_quality(report), '.3f')} "
            f"| {_fmt(report.quality.drop_mean if report.quality else None, '.3f')} |"
        )
    return "\n".join(lines)


def _mean_quality(report: BenchReport) -> float | None:
    """The judged mean over hits and misses, weighted by their counts (None where nothing was judged)."""
    quality = report.quality
    if quality is None or report.hit_rate is None:
        return None
    parts = [(report.hit_rate, quality.hit_mean), (1.0 - report.hit_rate, quality.miss_mean)]
    known = [(weight, mean) for weight, mean in parts if mean is not None and weight > 0]
    total = sum(weight for weight, _ in known)
    return sum(weight * mean for weight, mean in known) / total if total else None


def _bytes_text(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
