"""What a request that found a usable entry would cost on either route now, for admission's
cost-aware routing (jobs.admission.cheaper_route): read from DiffServe's allocator's newest decision
(cascade_decisions: the per-model latencies it measured and f(t) at the threshold it set), kept per
process for a few seconds, since a decision stands for a whole monitor period."""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from typing import Any, Final

from core.settings import Settings
from core.vocabulary import Allocator
from db import cascade as cascade_db
from db.engine import session_scope
from jobs.admission import RouteCosts
from jobs.queues import settings_hits_need_large

KEEP_S: Final = 5.0  # as long as a light worker keeps the threshold (workers.cascade.THRESHOLD_TTL_S)


def costs_of(inputs: dict[str, Any], solution: dict[str, Any], *, hits_on_large: bool) -> RouteCosts | None:
    """The costs a decision measured; None for a cold start's, which measured no latency or f(t)."""
    step_ms = inputs.get("large_step_ms" if hits_on_large else "small_step_ms")
    light_s, heavy_s = inputs.get("light_latency_s"), inputs.get("heavy_latency_s")
    escalated = solution.get("escalated")
    if step_ms is None or light_s is None or heavy_s is None or escalated is None:
        return None
    return RouteCosts(
        hit_step_s=float(step_ms) / 1e3,
        light_stage_s=float(light_s),
        heavy_s=float(heavy_s),
        escalated=float(escalated),
    )


def route_costs_now(settings: Settings, cache: MutableMapping[str, tuple[float, Any]]) -> RouteCosts | None:
    """The newest decision's costs, re-read every KEEP_S seconds into `cache` (the worker's
    WorkerContext.cascade_cache, beside the light stage's threshold); None unless the cascade is on
    with cost-aware hits and its allocator has measured both routes."""
    if settings.allocator is not Allocator.DIFFSERVE or not settings.cascade_cost_aware_hits:
        return None
    cached = cache.get("route_costs")
    now = time.monotonic()
    if cached is not None and now - cached[0] < KEEP_S:
        return cached[1]  # type: ignore[no-any-return]
    with session_scope(settings) as session:
        decision = cascade_db.latest_decision(session)
        hits_on_large = settings_hits_need_large(settings)
        costs = (
            None
            if decision is None
            else costs_of(decision.inputs, decision.solution, hits_on_large=hits_on_large)
        )
    cache["route_costs"] = (now, costs)
    return costs
