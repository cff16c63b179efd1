"""Validate the simulator against a replay: do they agree on hit rate, k distribution and compute saved?

A simulated and a measured report of the same workload and profile differ for known reasons:
the stack searches an HNSW index (approximate; pgvector's ef_search 40) where the simulator is
exact, and completion order under concurrency shifts which entries exist at each admission. The
stated tolerance allows for those and for sampling noise, never for a wrong policy:

    hit_rate       |sim - measured| <= max(0.05, 3 standard errors of a binomial rate over the
                   measured requests)
    compute_saved  |sim - measured| <= max(0.05, 3 standard errors, the same way)
    k_histogram    total variation distance between the two k distributions of hits
                   <= max(0.15, 0.5 * sqrt(2 * bins / hits)), hits being the smaller of the two
                   counts: the second term bounds the distance two samples of that size from one
                   distribution are expected to show (sum of binomial standard errors, by
                   Cauchy-Schwarz), so a replay of a few dozen hits is not failed for noise
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.report import BenchReport

HIT_RATE_TOLERANCE = 0.05
COMPUTE_SAVED_TOLERANCE = 0.05
K_DISTRIBUTION_TOLERANCE = 0.15
STANDARD_ERRORS = 3.0


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    simulated: float | None
    measured: float | None
    difference: float | None
    tolerance: float
    ok: bool


@dataclass(frozen=True, slots=True)
class Comparison:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def describe(self) -> str:
        """Aligned lines, one per check, then the verdict."""
        lines = [f"{'metric':<14} {'simulated':>10} {'measured':>10} {'diff':>8} {'tol':>7}  ok"]
        for c in self.checks:
            lines.append(
                f"{c.name:<14} {_num(c.simulated):>10} {_num(c.measured):>10} {_num(c.difference):>8} "
                f"{c.tolerance:>7.3f}  {'yes' if c.ok else 'NO'}"
            )
        lines.append("simulator agrees with the replay" if self.ok else "simulator DISAGREES with the replay")
        return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _fields(
    report: BenchReport | Mapping[str, Any],
) -> tuple[int, float | None, float | None, dict[int, int]]:
    data = report.as_json() if isinstance(report, BenchReport) else report
    histogram = {int(k): int(n) for k, n in (data.get("k_histogram") or {}).items()}
    return int(data["requests"]), data.get("hit_rate"), data.get("compute_saved"), histogram


def total_variation(a: Mapping[int, int], b: Mapping[int, int]) -> float:
    """Half the L1 distance between two histograms as distributions (0 when both are empty; 1 when one is)."""
    total_a, total_b = sum(a.values()), sum(b.values())
    if total_a == 0 and total_b == 0:
        return 0.0
    if total_a == 0 or total_b == 0:
        return 1.0
    keys = set(a) | set(b)
    return 0.5 * sum(abs(a.get(k, 0) / total_a - b.get(k, 0) / total_b) for k in keys)


def _rate_check(name: str, sim: float | None, measured: float | None, requests: int, floor: float) -> Check:
    if sim is None or measured is None:
        return Check(name, sim, measured, None, floor, sim is None and measured is None)
    p = min(max(measured, 0.0), 1.0)
    error = math.sqrt(p * (1.0 - p) / requests) if requests > 0 else 0.0
    tolerance = max(floor, STANDARD_ERRORS * error)
    difference = sim - measured
    return Check(name, sim, measured, difference, tolerance, abs(difference) <= tolerance)


def compare_reports(
    simulated: BenchReport | Mapping[str, Any], measured: BenchReport | Mapping[str, Any]
) -> Comparison:
    """Check a simulated report against a measured one (reports or their JSON objects)."""
    _, sim_hit, sim_saved, sim_k = _fields(simulated)
    requests, hit, saved, k = _fields(measured)
    distance = total_variation(sim_k, k)
    hits = min(sum(sim_k.values()), sum(k.values()))
    bins = len(set(sim_k) | set(k))
    noise = 0.5 * math.sqrt(2 * bins / hits) if hits else 0.0
    k_tolerance = max(K_DISTRIBUTION_TOLERANCE, noise)
    return Comparison(
        checks=(
            _rate_check("hit_rate", sim_hit, hit, requests, HIT_RATE_TOLERANCE),
            _rate_check("compute_saved", sim_saved, saved, requests, COMPUTE_SAVED_TOLERANCE),
            Check("k_histogram", None, None, distance, k_tolerance, distance <= k_tolerance),
        )
    )
