"""DiffServe's controller (3.3) as the service runs it: `reprise.rebalance_pools` under
REPRISE_ALLOCATOR=diffserve. One controller owns the pools: this one, or MoDM's monitor, never both.

One run, every settings.monitor_period_s, in one transaction:
1. take the monitor's lock (the same as MoDM's: one decision at a time) and skip a period decided;
2. measure: the period's arrivals, hits and per-model service times (db.stats); the queues (the
   broker) for Little's law; the scores the discriminator gave (f(t) measured, else the profiled
   curve stored with the discriminator); the workers alive and their pins;
3. estimate the demand (an EWMA over periods), solve the MILP (jobs.policies.allocation) for the
   threshold and the split, each model profiled at batch size 1 only (its measured service time per
   job; the workers batch on their own, up to REPRISE_MAX_BATCH, workers.runtime.batch_loop), so no
   batch size is chosen here (the simulator's MILP chooses them); move the fewest unpinned workers to
   its heavy (large) / light (small) split. Infeasible, the MILP's fallback takes the fewest
   escalations (the lowest threshold);
4. record the decision in cascade_decisions: the light workers read its threshold from there.

A cold start plans nothing: while no model's speed is known (measured, carried from a decision, or
configured) or no demand has been measured (the period saw no arrival and no decision estimated one),
the decision keeps the starting threshold, REPRISE_CASCADE_THRESHOLD, and the pool as it is (one worker
per model at least, within the bounds), and says why (`solution.cold_start`). An idle period is not a
demand of zero: the MILP would answer it with the top threshold, and the first requests of a burst would
all escalate until the next period. Such a decision carries no demand, so the first measured period
starts the EWMA afresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from core.settings import Settings
from core.vocabulary import Role
from db import cascade as cascade_db
from db import pools as db_pools
from db.engine import session_scope
from db.models import CascadeDecision
from db.stats import PeriodStats, stats_between
from jobs.broker import broker_client
from jobs.policies.allocation import (
    SLO_OVER_HEAVY,
    AllocationPlan,
    AllocationProblem,
    Demand,
    ModelProfile,
    ewma,
    solve_allocation,
    with_backlog,
)
from jobs.policies.cascade import MIN_MEASURED_SCORES, THRESHOLD_GRID, EscalationCurve, feature_kind_for
from jobs.pools.actuator import PoolActuator
from jobs.pools.loop import MonitorConfig, Switch, counts
from jobs.pools.policy import choose_moves, large_bounds
from jobs.pools.rebalance import StepTimes, last_window, step_times, survey_pool
from jobs.queues import Queue, queue_depth, settings_hits_need_large

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CascadeInputs:
    """What one period measured, as the MILP needs it (rates per second, times in seconds)."""

    problem: AllocationProblem
    record: dict[str, Any]


def allocate_cascade(
    settings: Settings, actuator: PoolActuator, *, window: tuple[datetime, datetime] | None = None
) -> CascadeDecision | None:
    """One run of DiffServe's controller in its own transaction (see the module docstring)."""
    with session_scope(settings) as session:
        return decide_cascade(settings, session, actuator, window=window)


def decide_cascade(
    settings: Settings,
    session: Session,
    actuator: PoolActuator,
    *,
    window: tuple[datetime, datetime] | None = None,
) -> CascadeDecision | None:
    """Steps 1 to 4 of the module docstring (or a cold start's decision); the decision recorded, or None
    when there was nothing to decide (another run holds the lock, the period is decided, no pool worker
    answered)."""
    if not db_pools.lock_monitor(session):
        return None
    since, until = window or last_window(session, settings.monitor_period_s)
    previous = cascade_db.latest_decision(session)
    if window is None and previous is not None and previous.period_start == since:
        return None
    pool, pinned = survey_pool(session, actuator, settings)
    if not pool:
        log.warning("cascade allocator: no large or small worker answered; nothing to allocate")
        return None
    if len(pool) < 2:  # one worker cannot host both models: light stages or escalations would wait forever
        log.error("cascade allocator: the cascade needs two GPU workers at least (a light and a heavy one)")
    stats = stats_between(session, since=since, until=until)
    before = counts(pool)
    times = step_times(stats, settings, previous)
    why_cold = cold_start(stats, previous, times)
    if why_cold is not None:
        return _record_cold_start(
            settings, session, actuator, (pool, pinned), stats, times, why_cold, window=(since, until)
        )
    inputs = measure(settings, session, stats, previous, times, pool=pool, pinned=pinned, since=since)
    plan = solve_allocation(inputs.problem)
    switches = _move(session, actuator, pool, pinned, plan.heavy_workers)
    after = counts(pool)
    decision = CascadeDecision(
        period_start=since,
        period_seconds=int((until - since).total_seconds()),
        inputs={**inputs.record, "before": {"heavy": before[0], "light": before[1]}},
        solution=plan.as_json(),
        threshold=plan.threshold,
        feasible=plan.feasible,
        objective=plan.objective,
        solve_ms=plan.solve_ms,
        target_light=plan.light_workers,
        target_heavy=plan.heavy_workers,
        applied_light=after[1],
        applied_heavy=after[0],
        switches=[switch.as_json() for switch in switches],
    )
    cascade_db.add_decision(session, decision)
    session.flush()
    _log(plan, after)
    return decision


def cold_start(stats: PeriodStats, previous: CascadeDecision | None, times: StepTimes) -> str | None:
    """Why the allocator cannot plan yet (see the module docstring); None when it can."""
    if times.large_ms is None or times.small_ms is None:
        return "no model's speed is known yet"
    carried = previous.inputs.get("demand_estimate") if previous is not None else None
    if stats.cache.arrivals == 0 and not carried:
        return "no demand measured yet"
    return None


def _record_cold_start(
    settings: Settings,
    session: Session,
    actuator: PoolActuator,
    workers: tuple[dict[str, Role], dict[str, Role]],
    stats: PeriodStats,
    times: StepTimes,
    why: str,
    *,
    window: tuple[datetime, datetime],
) -> CascadeDecision:
    """A cold start's decision: the starting threshold, the pool as it is with a worker per model."""
    pool, pinned = workers
    before = counts(pool)
    lo, hi = heavy_bounds(settings, pool, pinned)
    heavy = before[0]
    if len(pool) > 1:  # one worker cannot host both models (decide_cascade logged it)
        heavy = min(max(heavy, 1), len(pool) - 1)
    heavy = max(lo, min(hi, heavy))
    switches = _move(session, actuator, pool, pinned, heavy)
    after = counts(pool)
    threshold = settings.cascade_threshold
    decision = CascadeDecision(
        period_start=window[0],
        period_seconds=int((window[1] - window[0]).total_seconds()),
        inputs={
            "arrivals": stats.cache.arrivals,
            "request_rate": stats.request_rate,
            "large_step_ms": times.large_ms,
            "small_step_ms": times.small_ms,
            "step_ms_sources": times.sources,
            "workers": len(pool),
            "before": {"heavy": before[0], "light": before[1]},
        },
        solution={
            "threshold": threshold,
            "light_workers": len(pool) - heavy,
            "heavy_workers": heavy,
            "feasible": True,
            "fallback": None,
            "cold_start": f"{why}: the starting threshold (REPRISE_CASCADE_THRESHOLD), the pool as it is",
        },
        threshold=threshold,
        feasible=True,
        objective=None,
        solve_ms=0.0,
        target_light=len(pool) - heavy,
        target_heavy=heavy,
        applied_light=after[1],
        applied_heavy=after[0],
        switches=[switch.as_json() for switch in switches],
    )
    cascade_db.add_decision(session, decision)
    session.flush()
    log.info(
        "cascade allocator: cold start (%s); threshold %.2f, now %d heavy / %d light", why, threshold, *after
    )
    return decision


def _move(
    session: Session, actuator: PoolActuator, pool: dict[str, Role], pinned: dict[str, Role], heavy: int
) -> list[Switch]:
    """Ask the fewest unpinned workers to move so that `heavy` host the large model; `pool` and
    worker_roles follow the moves they accepted."""
    switches = []
    for name, role in choose_moves(pool, pinned, heavy).items():
        ok = actuator.switch(name, role)
        switches.append(Switch(worker=name, source=pool[name], destination=role, ok=ok))
        if ok:
            db_pools.record_role(session, worker_name=name, role=role)
            pool[name] = role
    return switches


def measure(
    settings: Settings,
    session: Session,
    stats: PeriodStats,
    previous: CascadeDecision | None,
    times: StepTimes,
    *,
    pool: dict[str, Role],
    pinned: dict[str, Role],
    since: datetime,
) -> CascadeInputs:
    """The MILP's inputs from the period, past a cold start (both models' speeds known)."""
    if times.large_ms is None or times.small_ms is None:
        raise ValueError("a cold start: no MILP without both models' speeds")
    steps, light_steps = settings.steps, settings.cascade_light_steps or settings.steps
    light_s, heavy_s = times.small_ms * light_steps / 1e3, times.large_ms * steps / 1e3
    demand, estimate = period_demand(settings, stats, previous)
    curve = escalation_curve(settings, session, since)
    bounds = heavy_bounds(settings, pool, pinned)
    slo_s = settings.cascade_slo_s or SLO_OVER_HEAVY * heavy_s
    problem = AllocationProblem(
        light=ModelProfile(settings.model_source("small"), {1: light_s}),
        heavy=ModelProfile(settings.model_source("large"), {1: heavy_s}),
        demand=demand,
        curve=curve,
        workers=len(pool),
        slo_s=slo_s,
        heavy_bounds=bounds,
        overprovision=settings.cascade_overprovision,
    )
    record = {
        "arrivals": stats.cache.arrivals,
        "request_rate": stats.request_rate,
        "hit_rate": stats.cache.hit_rate,
        "demand_estimate": estimate,
        "light_rps": demand.light,
        "heavy_extra_rps": demand.heavy_extra_rps,
        "large_step_ms": times.large_ms,
        "small_step_ms": times.small_ms,
        "step_ms_sources": times.sources,
        "light_latency_s": light_s,
        "heavy_latency_s": heavy_s,
        "light_wait_s": demand.light_wait_s,
        "heavy_wait_s": demand.heavy_wait_s,
        "slo_s": slo_s,
        "overprovision": settings.cascade_overprovision,
        "curve": curve.as_json(),
        "workers": len(pool),
        "heavy_bounds": list(bounds),
    }
    return CascadeInputs(problem, record)


def period_demand(
    settings: Settings, stats: PeriodStats, previous: CascadeDecision | None
) -> tuple[Demand, dict[str, float]]:
    """The period's demand, an EWMA over periods (DiffServe 3.3): misses enter the cascade; hits on the
    small model are light work in full light generations (T - k of T steps each), or heavy work when
    only the large model can resume them; the queues' waits by Little's law, and what waits is to be
    drained within one period (jobs.policies.allocation.with_backlog)."""
    steps, hit_rate = settings.steps, stats.cache.hit_rate or 0.0
    carried = previous.inputs.get("demand_estimate") if previous is not None else None
    misses = ewma(carried.get("cascade_rps") if carried else None, stats.request_rate * (1.0 - hit_rate))
    hit_work = (
        stats.request_rate * hit_rate * sum(rate * (1.0 - k / steps) for k, rate in stats.k_rates.items())
    )
    hits = ewma(carried.get("hit_rps") if carried else None, hit_work)
    on_large = settings_hits_need_large(settings)
    light = misses + (0.0 if on_large else hits)
    queued = _queued(settings)
    demand = Demand(
        cascade_rps=misses,
        light_rps=light,
        light_wait_s=queued[0] / light if light > 0 else 0.0,  # Little's law, W = L / lambda (3.3)
        heavy_wait_s=queued[1] / misses if misses > 0 else 0.0,
        heavy_extra_rps=hits if on_large else 0.0,
    )
    demand = with_backlog(
        demand, light_queued=queued[0], heavy_queued=queued[1], drain_s=float(settings.monitor_period_s)
    )
    return demand, {
        "cascade_rps": misses,
        "hit_rps": hits,
        "light_queued": queued[0],
        "heavy_queued": queued[1],
    }


def heavy_bounds(settings: Settings, pool: dict[str, Role], pinned: dict[str, Role]) -> tuple[int, int]:
    """How many pool workers may host the heavy (large) model: pins and the configured limits."""
    pinned_in_pool = [pool[name] for name in pool if name in pinned]
    bounds = large_bounds(
        len(pool),
        pinned_large=pinned_in_pool.count(Role.LARGE),
        pinned_small=pinned_in_pool.count(Role.SMALL),
        limits=MonitorConfig.from_settings(settings).limits,
    )
    return bounds.lo, bounds.hi


def escalation_curve(settings: Settings, session: Session, since: datetime) -> EscalationCurve:
    """f(t): from the scores the discriminator gave this period when there are enough, else the curve
    profiled when it was trained (both on its grid), else every query escalated (no discriminator:
    the light workers escalate everything)."""
    light = settings.model_source("small")
    kind = feature_kind_for(light).value
    stored = cascade_db.latest_discriminator(session, light_model=light, features=kind)
    if stored is None or "curve" not in stored.report:
        return EscalationCurve(
            THRESHOLD_GRID, (1.0,) * len(THRESHOLD_GRID), "no discriminator: all escalated"
        )
    profiled = EscalationCurve.from_json(stored.report["curve"])
    scores = cascade_db.scores_since(session, since)
    if len(scores) >= MIN_MEASURED_SCORES:  # on the profiled grid, so that thresholds keep their meaning
        source = f"measured: {len(scores)} scores this period"
        return EscalationCurve.from_scores(scores, grid=profiled.thresholds, source=source)
    return EscalationCurve(
        profiled.thresholds, profiled.escalated, f"profiled: discriminator {stored.version}"
    )


def _queued(settings: Settings) -> tuple[int, int]:
    """Light stages and escalations waiting on the broker; 0 where it cannot be asked."""
    client = broker_client(settings, socket_timeout=2.0)
    try:
        return (queue_depth(client, Queue.CASCADE_LIGHT) or 0, queue_depth(client, Queue.CASCADE_HEAVY) or 0)
    finally:
        client.close()


def _log(plan: AllocationPlan, after: tuple[int, int]) -> None:
    log.info(
        "cascade allocator: threshold %.2f (f %.2f), target %d heavy / %d light, now %d / %d, %.1f ms%s",
        plan.threshold,
        plan.escalated,
        plan.heavy_workers,
        plan.light_workers,
        after[0],
        after[1],
        plan.solve_ms,
        f" ({plan.fallback})" if plan.fallback else "",
    )
