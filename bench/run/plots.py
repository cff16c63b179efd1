"""PNG figures of benchmark results (matplotlib, Agg backend: no display needed).

plot_over_trace        cumulative hit rate and compute saved along the trace, one line per run
plot_against_cache     hit rate and compute saved against the cache budget, one line per
                       profile and policy (the shape of NIRVANA Table 3 and MoDM Fig. 9)
plot_against_rate      throughput against the offered request rate, with vanilla
                       (the shape of MoDM Fig. 10)
plot_slo_against_rate  SLO violations and quality drop against the offered rate, one line per
                       profile (the shape of DiffServe Figs. 4 and 5)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, never a window

import matplotlib.pyplot as plt

from bench.run.outcomes import RequestOutcome, running_rates
from bench.run.report import SweepPoint


@dataclass(frozen=True, slots=True)
class TraceCurve:
    """One run's outcomes with the per-model step costs that price them."""

    label: str
    outcomes: Sequence[RequestOutcome]
    prices: Mapping[str, float]
    large_step_ms: float


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_over_trace(curves: Sequence[TraceCurve], path: Path, *, title: str = "") -> Path:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for curve in curves:
        hit_rates, saved = running_rates(curve.outcomes, curve.prices, curve.large_step_ms)
        xs = range(1, len(hit_rates) + 1)
        top.plot(xs, hit_rates, label=curve.label)
        bottom.plot(xs, saved, label=curve.label)
    top.set_ylabel("hit rate (cumulative)")
    bottom.set_ylabel("compute saved (cumulative)")
    bottom.set_xlabel("requests completed, in arrival order")
    for axis in (top, bottom):
        axis.set_ylim(0, 1)
        axis.grid(alpha=0.3)
    top.legend(loc="lower right")
    top.set_title(title or "Hit rate and compute saved over the trace")
    return _save(fig, path)


def _series(points: Sequence[SweepPoint], x: str) -> dict[str, list[tuple[float, SweepPoint]]]:
    series: dict[str, list[tuple[float, SweepPoint]]] = defaultdict(list)
    for point in points:
        value = point.cache_bytes if x == "cache" else point.report.arrivals.get("rate_rps") or 0.0
        series[f"{point.report.profile} {point.policy}"].append((float(value), point))
    return {label: sorted(items, key=lambda item: item[0]) for label, items in series.items()}


def plot_against_cache(points: Sequence[SweepPoint], path: Path, *, title: str = "") -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, items in _series(points, "cache").items():
        xs = [size / 2**20 for size, _ in items]
        left.plot(xs, [p.report.hit_rate or 0.0 for _, p in items], marker="o", label=label)
        right.plot(xs, [p.report.compute_saved or 0.0 for _, p in items], marker="o", label=label)
    for axis, name in ((left, "hit rate"), (right, "compute saved")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("cache budget (MiB)")
        axis.set_ylabel(name)
        axis.set_ylim(0, 1)
        axis.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle(title or "Against cache size")
    return _save(fig, path)


def plot_against_rate(points: Sequence[SweepPoint], path: Path, *, title: str = "") -> Path:
    fig, axis = plt.subplots(figsize=(7, 4.5))
    vanilla: dict[float, float] = {}
    for label, items in _series(points, "rate").items():
        xs = [rate * 60.0 for rate, _ in items]
        axis.plot(xs, [(p.report.throughput_rps or 0.0) * 60.0 for _, p in items], marker="o", label=label)
        for rate, p in items:
            if p.report.vanilla_throughput_rps is not None:
                vanilla[rate] = p.report.vanilla_throughput_rps
    if vanilla:
        rates = sorted(vanilla)
        axis.plot(
            [r * 60 for r in rates], [vanilla[r] * 60 for r in rates], marker="s", ls="--", label="vanilla"
        )
    top = max(
        [r * 60 for r, _ in (item for items in _series(points, "rate").values() for item in items)] or [1.0]
    )
    axis.plot([0, top], [0, top], color="grey", lw=0.8, ls=":", label="offered")
    axis.set_xlabel("request rate (requests/min)")
    axis.set_ylabel("throughput (requests/min)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title(title or "Throughput under increasing request rate")
    return _save(fig, path)


def plot_slo_against_rate(points: Sequence[SweepPoint], path: Path, *, title: str = "") -> Path:
    """Violations of the run's own SLO (x2 where it has none) and the quality drop, against the rate."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, items in _series(points, "rate").items():
        xs = [rate for rate, _ in items]
        slo = [p.report.slo_violations for _, p in items]
        left.plot(
            xs, [(v.at_slo if v.slo_s is not None else v.x2) or 0.0 for v in slo], marker="o", label=label
        )
        drops = [p.report.quality.drop_mean if p.report.quality is not None else None for _, p in items]
        if any(d is not None for d in drops):
            right.plot(xs, [d or 0.0 for d in drops], marker="o", label=label)
    slo_s = next((p.report.slo_violations.slo_s for p in points if p.report.slo_violations.slo_s), None)
    left.set_ylabel(f"SLO violations ({slo_s:g} s)" if slo_s else "SLO violations (2x)")
    right.set_ylabel("mean quality drop (lab judge)")
    for axis in (left, right):
        axis.set_xlabel("request rate (requests/s)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(title or "SLO violations and quality under increasing request rate")
    return _save(fig, path)
