"""A simulation's report: its outcomes summarised, with each request's quality predicted on a lab trace."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from bench.quality.model import simulated_quality
from bench.run.outcomes import ReportContext, RequestOutcome, summarize
from bench.run.report import BenchReport
from bench.workload.trace import Workload
from core.vocabulary import LAB_ATTRIBUTES, LookupMode

if TYPE_CHECKING:
    from bench.sim.config import SimConfig


def judged_report(
    done: list[RequestOutcome], load: Workload, cfg: SimConfig, vanilla: float | None, emb: dict[str, object]
) -> BenchReport:
    """The run's report, with each request's quality predicted from a profile on a lab trace. A cascade
    sets its own requests' quality (bench.sim.cascade); on a trace of no lab scene nothing is judged. A
    run that caches nothing outside a cascade is its own vanilla: its throughput is vanilla's."""
    judged, source = simulated_quality(
        done,
        prompts=[r.prompt for r in load.requests],
        hit_policy=cfg.profile.hit_policy,
        small_name=cfg.costs.small_model or "small",
        override=cfg.quality_profile,
        live=cfg.quality_from,
        lookup=LookupMode.TEXT_TO_IMAGE if emb.get("name") == LAB_ATTRIBUTES else LookupMode.TEXT_TO_TEXT,
    )
    if source is None:
        judged = [replace(o, quality=None, fresh_quality=None) for o in judged]
    elif cfg.cascade is not None:
        source += f"; cascade from {cfg.cascade.profile.source}"
    context = replace(report_context(load, cfg, vanilla, emb), quality_source=source, quality_interval=False)
    report = summarize(judged, context)
    if not cfg.profile.caches and cfg.cascade is None:
        report = replace(report, vanilla_throughput_rps=report.throughput_rps)
    return report


def report_context(
    workload: Workload, config: SimConfig, vanilla_throughput_rps: float | None, embedder: dict[str, object]
) -> ReportContext:
    profile = config.profile
    return ReportContext(
        profile=profile.name,
        costs=config.costs,
        slo_base_ms=config.costs.full_generation_ms(profile.steps),
        vanilla_throughput_rps=vanilla_throughput_rps,
        embedder=embedder,
        trace=workload.describe_trace(),
        arrivals=workload.describe_arrivals(),
        entry_bytes=float(config.costs.state_bytes * (1 + len(profile.cached_ks or ())))
        if profile.caches
        else None,
        png_bytes=float(config.costs.png_bytes),
        slo_s=config.slo_s,
    )
