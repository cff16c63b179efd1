"""What happened to each request, and the report computed from it.

The replay builds `RequestOutcome`s from job objects, the simulator from its events; both go
through `summarize`, so a simulated and a measured report are computed the same way.

Accounting (DESIGN.md "What counts as work done"):
    hit_rate       hits / succeeded requests
    compute_saved  1 - sum over requests and models of evaluations x that model's step cost,
                   divided by sum over requests of T x the large model's step cost (what running
                   the large model for all T steps on every request would cost)
    latency        arrival to completion of the job (the image's latent stored)
    slo_violations fraction of succeeded requests slower than 2x / 4x `slo_base_ms`, the large
                   model's full-generation latency (MoDM 6 "SLO Compliance")
    throughput     succeeded requests / (last completion - first arrival)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from bench.quality.drops import Strata, by_bin, drop_interval, stratified_drop
from bench.run.costs import StepCosts
from bench.run.report import AdmissionLatency, BenchReport, Latency, Quality, SloViolations
from core.errors import UnknownModel

SUCCEEDED = "succeeded"


class Served(StrEnum):
    """What served a request, the strata of its drop: the full large model alone (a miss with every step
    a full call: it is its own fresh generation, drop 0), a hit (NIRVANA/MoDM), the cascade's light
    image kept by the discriminator (DiffServe), or a miss run with the step cache (DeepCache/TeaCache)."""

    FULL = "full"
    HIT = "hit"
    LIGHT = "light"
    STEP_CACHE = "step_cache"


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """One request. Times in seconds since the run started; `denoiser_evaluations` per model name."""

    seq: int
    prompt_idx: int
    status: str
    hit: bool
    k: int | None
    steps: int
    denoiser_evaluations: Mapping[str, int] = field(default_factory=dict)
    arrival_s: float = 0.0
    completed_s: float | None = None
    latency_ms: float | None = None
    admission_ms: float | None = None
    admission_parts_ms: Mapping[str, float] = field(default_factory=dict)  # embed, predict, lookup
    similarity: float | None = None  # a hit's similarity to its cached entry
    quality: float | None = None  # the judge's score of the result (bench.quality)
    fresh_quality: float | None = None  # the judge's score of a fresh generation of the same prompt and seed
    served: str = "full"  # a Served stratum: how much less than the full large model alone served it

    def __post_init__(self) -> None:
        if self.hit and self.served == Served.FULL:  # a hit is served by its cached work, whoever built it
            object.__setattr__(self, "served", Served.HIT)

    @property
    def succeeded(self) -> bool:
        return self.status == SUCCEEDED

    @property
    def reduced(self) -> bool:
        """Served with less than the full large model alone: its drop is known only by an audit."""
        return self.served != Served.FULL


@dataclass(frozen=True, slots=True)
class ReportContext:
    """What a report needs besides the outcomes."""

    profile: str
    costs: StepCosts
    slo_base_ms: float
    vanilla_throughput_rps: float | None
    embedder: Mapping[str, Any]
    trace: Mapping[str, Any]
    arrivals: Mapping[str, Any]
    entry_bytes: float | None
    png_bytes: float | None
    quality_source: str | None = None  # how outcomes' quality was obtained; None: not judged
    quality_interval: bool = True  # a measured drop has a bootstrap interval; a profile's prediction none
    slo_s: float | None = None  # the run's own SLO (a DiffServe pair's), reported beside x2 and x4


def step_ms_by_model(costs: StepCosts, outcomes: Sequence[RequestOutcome]) -> dict[str, float]:
    """Model name -> per-step cost. Names come from the costs, or, where they are unset, from the
    jobs: the large model is the one misses ran on (a miss always runs the large model), the small
    model any other one seen. More than two models cannot be priced: UnknownModel."""
    large, small = costs.large_model, costs.small_model
    if large is None:
        on_misses = Counter(
            name for o in outcomes if o.succeeded and not o.hit for name in o.denoiser_evaluations
        )
        large = on_misses.most_common(1)[0][0] if on_misses else None
    prices: dict[str, float] = {}
    if large is not None:
        prices[large] = costs.large_step_ms
    seen = {name for o in outcomes for name in o.denoiser_evaluations}
    others = sorted(seen - {large})
    if small is None and len(others) == 1:
        small = others[0]
    if small is not None and small != large:
        prices[small] = costs.small_step_ms
    unknown = sorted(seen - set(prices))
    if unknown:
        raise UnknownModel(
            f"no step cost for model(s) {', '.join(unknown)} (large={large}, small={small}): "
            "pass --costs with a `reprise bench runtime` JSON that names them"
        )
    return prices


def percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else None


def request_saved_ms(outcome: RequestOutcome, prices: Mapping[str, float], large_step_ms: float) -> float:
    """What one request saved against T large-model steps (0 exactly for a full large-model run)."""
    spent = math.fsum(count * prices[name] for name, count in outcome.denoiser_evaluations.items())
    return outcome.steps * large_step_ms - spent


def compute_saved(
    outcomes: Sequence[RequestOutcome], prices: Mapping[str, float], large_step_ms: float
) -> float | None:
    done = [o for o in outcomes if o.succeeded]
    baseline = sum(o.steps for o in done) * large_step_ms
    if baseline <= 0:
        return None
    return math.fsum(request_saved_ms(o, prices, large_step_ms) for o in done) / baseline


def throughput_rps(outcomes: Sequence[RequestOutcome]) -> float | None:
    done = [o for o in outcomes if o.succeeded and o.completed_s is not None]
    if not done:
        return None
    start = min(o.arrival_s for o in outcomes)
    end = max(o.completed_s for o in done if o.completed_s is not None)
    return len(done) / (end - start) if end > start else None


def _stage_percentiles(outcomes: Sequence[RequestOutcome]) -> dict[str, tuple[float | None, float | None]]:
    stages: dict[str, list[float]] = {}
    for outcome in outcomes:
        for stage, ms in outcome.admission_parts_ms.items():
            stages.setdefault(stage, []).append(ms)
    return {stage: (percentile(values, 50), percentile(values, 99)) for stage, values in stages.items()}


def summarize(outcomes: Sequence[RequestOutcome], context: ReportContext) -> BenchReport:
    """The report of a run (see the module docstring for every definition)."""
    done = [o for o in outcomes if o.succeeded]
    hits = [o for o in done if o.hit]
    histogram = Counter(o.k for o in hits if o.k is not None)
    prices = step_ms_by_model(context.costs, outcomes)
    latencies = [o.latency_ms for o in done if o.latency_ms is not None]
    admissions = [o.admission_ms for o in outcomes if o.admission_ms is not None]

    def over(factor: float) -> float | None:
        if not latencies:
            return None
        return sum(1 for ms in latencies if ms > factor * context.slo_base_ms) / len(latencies)

    return BenchReport(
        profile=context.profile,
        requests=len(outcomes),
        hit_rate=len(hits) / len(done) if done else None,
        k_histogram=dict(sorted(histogram.items())),
        compute_saved=compute_saved(outcomes, prices, context.costs.large_step_ms),
        throughput_rps=throughput_rps(outcomes),
        vanilla_throughput_rps=context.vanilla_throughput_rps,
        latency_ms=Latency(
            p50=percentile(latencies, 50), p95=percentile(latencies, 95), p99=percentile(latencies, 99)
        ),
        slo_violations=SloViolations(
            x2=over(2.0),
            x4=over(4.0),
            slo_s=context.slo_s,
            at_slo=over(context.slo_s * 1000.0 / context.slo_base_ms) if context.slo_s is not None else None,
        ),
        admission_ms=AdmissionLatency(
            p50=percentile(admissions, 50),
            p99=percentile(admissions, 99),
            stages=_stage_percentiles(outcomes),
        ),
        entry_bytes=context.entry_bytes,
        png_bytes=context.png_bytes,
        embedder=context.embedder,
        trace=context.trace,
        arrivals=context.arrivals,
        quality=summarize_quality(done, context.quality_source, interval=context.quality_interval),
        step_costs={
            "large_step_ms": round(context.costs.large_step_ms, 4),
            "small_step_ms": round(context.costs.small_step_ms, 4),
            "source": context.costs.source,
        },
    )


def summarize_quality(
    done: Sequence[RequestOutcome], source: str | None, *, interval: bool = True
) -> Quality | None:
    """The judge's quality of succeeded requests (see bench.run.report.Quality); None when not judged.
    `interval`: bootstrap drop_ci95 (a measurement); False for a model's prediction, which has none."""
    if source is None:
        return None
    judged = [o for o in done if o.quality is not None]
    hits = [o.quality for o in judged if o.hit and o.quality is not None]
    misses = [o.quality for o in judged if not o.hit and o.quality is not None]
    compared = [o for o in judged if o.fresh_quality is not None and o.quality is not None]
    hit_drops = [_drop(o) for o in compared if o.hit]
    strata = Strata(
        hits=sum(1 for o in judged if o.reduced),
        others=sum(1 for o in judged if not o.reduced),
        hit_drops=[_drop(o) for o in compared if o.reduced],
        other_drops=[_drop(o) for o in compared if not o.reduced],
    )
    return Quality(
        hit_mean=float(np.mean(hits)) if hits else None,
        hit_p5=percentile(hits, 5),
        miss_mean=float(np.mean(misses)) if misses else None,
        drop_mean=stratified_drop(strata),
        hit_drop_mean=float(np.mean(hit_drops)) if hit_drops else None,
        judged=len(judged),
        compared=len(compared),
        source=source,
        drop_ci95=drop_interval(strata) if interval else None,
        audited=len(hit_drops),
        by_stratum=_by_stratum(judged, compared),
        by_bin=tuple(
            by_bin(
                (o.similarity, o.k, _drop(o)) for o in compared if o.hit and o.similarity is not None and o.k
            )
        ),
    )


def _by_stratum(
    judged: Sequence[RequestOutcome], compared: Sequence[RequestOutcome]
) -> dict[str, dict[str, Any]]:
    """Per Served stratum present: its requests, those compared with a fresh generation, their mean drop."""
    rows: dict[str, dict[str, Any]] = {}
    for stratum in Served:
        drops = [_drop(o) for o in compared if o.served == stratum]
        count = sum(1 for o in judged if o.served == stratum)
        if count:
            mean = float(np.mean(drops)) if drops else None
            rows[stratum.value] = {"n": count, "compared": len(drops), "drop_mean": mean}
    return rows


def _drop(outcome: RequestOutcome) -> float:
    assert outcome.fresh_quality is not None and outcome.quality is not None
    return outcome.fresh_quality - outcome.quality


def running_rates(
    outcomes: Sequence[RequestOutcome], prices: Mapping[str, float], large_step_ms: float
) -> tuple[list[float], list[float]]:
    """Cumulative hit rate and compute saved after each succeeded request, in arrival order
    (the curves of the 'over the trace' figure)."""
    done = sorted((o for o in outcomes if o.succeeded), key=lambda o: (o.arrival_s, o.seq))
    hit_rates: list[float] = []
    saved: list[float] = []
    hits = 0
    baseline = saved_ms = 0.0
    for count, outcome in enumerate(done, start=1):
        hits += outcome.hit
        baseline += outcome.steps * large_step_ms
        saved_ms += request_saved_ms(outcome, prices, large_step_ms)
        hit_rates.append(hits / count)
        saved.append(saved_ms / baseline if baseline > 0 else 0.0)
    return hit_rates, saved
