"""The demo `make run` (`reprise run --demo N`) plays once the stack is up: N prompts through the
HTTP API with the demo tenant's key, with a progress bar, then a summary of what the cache did. On the quality
lab's models (the default) the prompts are a lab trace (scenes of the lab's world, Zipf-repeated and
paraphrased: lab.trace) and the summary adds the judge's quality of hits and misses (each image the
workers did not judge read through the API and judged here: bench.live.judging), and the drop
over all requests with its 95% interval from DEMO_AUDITS hits audited afresh (bench.live.audit: each
is the same request again with the cache off, so the audits cost DEMO_AUDITS more full generations
after the replay; the summary prints the seconds they took). On
other models, the first N prompts of the shared DiffusionDB trace, in file order.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.live.audit import audit_hits
from bench.live.judging import configured_scorer_of, judge_records
from bench.live.records import JobRecord, outcome_from_record
from bench.live.replay import ReplayOptions, replay_workload
from bench.run.outcomes import RequestOutcome, percentile, summarize_quality
from bench.run.profiles import ProfileName, build_profile
from bench.run.replayed import replay_quality
from bench.workload.trace import DEFAULT_PROMPTS, ArrivalKind, ArrivalSpec, build_workload, load_prompts
from core.errors import TraceError
from core.scoring import Scorer
from core.settings import Settings

DEMO_CONCURRENCY = 4  # requests in flight: enough to keep one worker per role busy
DEMO_AUDITS = 16
"""Hits the demo audits: 16 more full generations beside its 100 requests (the summary prints their
seconds), so the interval rests on more than a handful of hits while the demo stays short."""


def demo_summary(outcomes: Sequence[RequestOutcome]) -> str:
    """Hits, misses, k histogram, steps saved and latency p50/p95, as a few lines."""
    done = [o for o in outcomes if o.succeeded]
    hits = [o for o in done if o.hit]
    failed = len(outcomes) - len(done)
    histogram = Counter(o.k for o in hits if o.k is not None)
    requested = sum(o.steps for o in done)
    saved = sum(o.k or 0 for o in hits)
    latencies = [o.latency_ms for o in done if o.latency_ms is not None]
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    k_text = " ".join(f"k={k}:{histogram[k]}" for k in sorted(histogram)) or "none"
    share = f" ({saved / requested:.1%} of {requested})" if requested else ""
    return "\n".join(
        [
            f"demo: {len(done)} of {len(outcomes)} requests succeeded"
            + (f", {failed} did not" if failed else ""),
            f"  hits {len(hits)}  misses {len(done) - len(hits)}"
            + (f"  hit rate {len(hits) / len(done):.1%}" if done else ""),
            f"  k histogram  {k_text}",
            f"  steps saved  {saved}{share}",
            "  latency      "
            + (
                f"p50 {p50 / 1000:.2f} s  p95 {p95 / 1000:.2f} s"
                if p50 is not None and p95 is not None
                else "-"
            ),
        ]
    )


def run_demo(
    settings: Settings, *, base_url: str, api_key: str, prompts: int, should_stop: Callable[[], bool]
) -> None:
    """Replay the first `prompts` prompts with `api_key` (the demo tenant's key `make run` hands the
    newcomer) and print a summary. Problems are printed, never raised: the stack keeps running."""
    try:
        _run_demo(settings, base_url=base_url, api_key=api_key, prompts=prompts, should_stop=should_stop)
    except TraceError as error:
        print(f"demo skipped: {error}", file=sys.stderr)
    except Exception as error:  # the demo is a courtesy: report it, keep the stack up
        print(f"demo failed: {type(error).__name__}: {error}", file=sys.stderr)


def _run_demo(
    settings: Settings, *, base_url: str, api_key: str, prompts: int, should_stop: Callable[[], bool]
) -> None:
    trace = load_prompts(_lab_prompts(settings, prompts) if _on_lab_models(settings) else DEFAULT_PROMPTS)
    workload = build_workload(
        trace, ArrivalSpec(kind=ArrivalKind.CLOSED, concurrency=DEMO_CONCURRENCY), limit=prompts
    )
    profile = build_profile(ProfileName.CONFIGURED, settings)
    print(f"demo: replaying the first {len(workload.requests)} prompts of {trace.path.name}", flush=True)
    records = replay_workload(
        workload,
        ReplayOptions(base_url=base_url, api_key=api_key),
        profile=profile,
        should_stop=should_stop,
    )
    print(demo_summary([outcome_from_record(record) for record in records]), flush=True)
    scorer = configured_scorer_of(settings) if _on_lab_models(settings) else None
    records = judge_records(records, base_url=base_url, api_key=api_key, scorer=scorer)
    judged = [(r.job.get("metrics") or {}) for r in records if r.job is not None]
    print(quality_line(judged), flush=True)
    if any(row.get("quality") is not None for row in judged):
        print(drop_line(base_url, api_key, records, scorer=scorer), flush=True)


def _on_lab_models(settings: Settings) -> bool:
    return settings.model_source("large").startswith("lab:")


def _lab_prompts(settings: Settings, count: int) -> Path:
    """A lab trace of `count` requests over count / 3 scenes (so that scenes repeat), written under
    the data directory."""
    from lab.trace import lab_trace

    trace = lab_trace([0.0] * count, scenes=max(1, count // 3), seed=0)
    return trace.write(settings.data_dir / "lab-demo")[0]


def quality_line(metrics: Sequence[dict[str, Any]]) -> str:
    """The judge's mean quality of hits and misses (lab models only)."""
    scores: dict[str, list[float]] = {"hit": [], "miss": []}
    for row in metrics:
        if row.get("quality") is not None and row.get("route") in scores:
            scores[str(row["route"])].append(float(row["quality"]))
    if not scores["hit"] and not scores["miss"]:
        return "  quality      - (judged only on the quality lab's models and prompts)"
    plural = {"hit": "hits", "miss": "misses"}
    parts = [f"{plural[route]} {sum(v) / len(v):.3f}" for route, v in scores.items() if v]
    return "  quality      " + "  ".join(parts) + "  (the lab judge: share of the prompt's attributes shown)"


def drop_line(
    base_url: str,
    api_key: str,
    records: Sequence[JobRecord],
    audits: int = DEMO_AUDITS,
    *,
    scorer: Scorer | None = None,
) -> str:
    """The drop over all requests with its 95% interval, from `audits` hits audited afresh (`scorer`
    reads the fresh images their workers did not judge: bench.live.judging)."""
    started = time.monotonic()
    outcomes = [outcome_from_record(record) for record in records]
    jobs = [record.job for record in records]
    scores = audit_hits(base_url, api_key, list(zip(outcomes, jobs, strict=True)), audits, scorer=scorer)
    spent = time.monotonic() - started
    judged, source = replay_quality(outcomes, jobs, audits=scores)
    quality = summarize_quality([o for o in judged if o.succeeded], source)
    if quality is None or quality.drop_mean is None:
        return "  drop         - (no hit could be audited)"
    interval = (
        f" (95% interval {quality.drop_ci95[0]:.3f} to {quality.drop_ci95[1]:.3f})"
        if quality.drop_ci95
        else ""
    )
    hits = "" if quality.hit_drop_mean is None else f"; hits {quality.hit_drop_mean:.3f}"
    return (
        f"  drop         {quality.drop_mean:.3f} over all requests{interval}{hits}, from "
        f"{quality.audited} hits generated again with the cache off ({spent:.0f} s more)"
    )
