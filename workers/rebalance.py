"""The pool monitor's run (MoDM 5.3, Algorithm 1): read the last period, decide, move workers, record.

One run, every settings.monitor_period_s (the beat task `reprise.rebalance_pools`):
1. take the monitor's lock (one decision at a time, cluster-wide) and skip a period already decided;
2. read the period's statistics (db.stats) and ask the broker which workers are alive and what they
   host; bring worker_roles up to date with the answers (drop workers that stopped without a word);
3. move pinned workers that are not in their pinned pool back to it;
4. compute the allocation (jobs.policies.pool_monitor) within the bounds and from the last decision's
   PID state;
5. move the fewest unpinned workers to reach it (workers.control), recording each accepted move;
6. record the decision (pool_decisions), which the next run continues from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.settings import Settings
from core.vocabulary import Role
from db import pool_decisions, worker_roles
from db.engine import session_scope
from db.models import PoolDecision
from db.stats import DEFAULT_PERIOD_SECONDS, PeriodStats, stats_between
from jobs.policies.pool_monitor import (
    POOL_ROLES,
    LargeBounds,
    PidGains,
    PidState,
    PoolLoad,
    RoleLimits,
    allocate,
    choose_moves,
    hit_workload,
    large_bounds,
    miss_workload,
    resume_state,
    throughput_per_worker,
)
from jobs.pool_control import PoolControl

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Per-step milliseconds of each model, and where each came from."""

    large_ms: float | None
    small_ms: float | None
    sources: dict[str, str]


def step_times(stats: PeriodStats, settings: Settings, previous: PoolDecision | None) -> StepTimes:
    """Each model's time per step: measured in the period (service time over steps run), else the
    previous decision's, else the configured profile, else the other model's (assumed equally fast)."""
    carried: dict[str, Any] = previous.inputs if previous is not None else {}
    configured = {Role.LARGE: settings.monitor_large_step_ms, Role.SMALL: settings.monitor_small_step_ms}
    found: dict[Role, float | None] = {}
    sources: dict[str, str] = {}
    for role in POOL_ROLES:
        service = stats.service.get(role.value)
        measured = service.ms_per_step if service is not None else None
        for source, value in (
            ("measured", measured),
            ("carried", carried.get(f"{role.value}_step_ms")),
            ("configured", configured[role]),
        ):
            if value is not None:
                found[role], sources[role.value] = float(value), source
                break
    for role, other in ((Role.LARGE, Role.SMALL), (Role.SMALL, Role.LARGE)):
        if role not in found and other in found:
            found[role], sources[role.value] = found[other], f"assumed equal to {other.value}"
    return StepTimes(found.get(Role.LARGE), found.get(Role.SMALL), sources)


def period_load(stats: PeriodStats, times: StepTimes, steps: int) -> PoolLoad | None:
    """Algorithm 1's inputs, rates per second; None while no model's speed is known."""
    if times.large_ms is None or times.small_ms is None:
        return None
    return PoolLoad(
        request_rate=stats.request_rate,
        hit_rate=stats.cache.hit_rate or 0.0,
        k_rates=stats.k_rates,
        steps=steps,
        large_throughput=throughput_per_worker(times.large_ms, steps),
        small_throughput=throughput_per_worker(times.small_ms, steps),
    )


def last_window(session: Session, period_s: int) -> tuple[datetime, datetime]:
    """The last `period_s` seconds of complete statistics intervals, by the database's clock."""
    now = session.scalar(select(func.now()))
    if now is None:
        raise RuntimeError("the database returned no time")
    bin_s = DEFAULT_PERIOD_SECONDS
    until = datetime.fromtimestamp(int(now.timestamp()) // bin_s * bin_s, UTC)
    return until - timedelta(seconds=period_s), until


def rebalance_pools(
    settings: Settings, control: PoolControl, *, window: tuple[datetime, datetime] | None = None
) -> PoolDecision | None:
    """One run of the monitor (see the module docstring); the decision recorded, or None when there
    was nothing to decide (another run holds the lock, the period is decided, no pool worker answered).

    `window` replaces the last monitoring period (tests, and operators replaying a stretch of time)."""
    with session_scope(settings) as session:
        # 1. One decision at a time; a period once.
        if not pool_decisions.lock_monitor(session):
            log.info("pool monitor: another decision is running")
            return None
        since, until = window or last_window(session, settings.monitor_period_s)
        previous = pool_decisions.latest_decision(session)
        if window is None and previous is not None and previous.period_start == since:
            return None
        # 2. What the period asked for, and who is there to serve it.
        stats = stats_between(session, since=since, until=until)
        live = control.roles()
        for name, role in live.items():
            worker_roles.record_role(session, worker_name=name, role=role)
        worker_roles.forget_all_but(session, alive=live)
        pinned = {row.worker_name: row.role for row in worker_roles.list_roles(session) if row.pinned}
        pool = {name: role for name, role in live.items() if role in POOL_ROLES}
        if not pool:
            log.warning("pool monitor: no large or small worker answered; nothing to rebalance")
            return None
        before = _counts(pool)
        # 3. Pinned workers first: the operator's word is the law.
        switches = [
            _move(session, control, pool, name, pinned[name])
            for name in sorted(pool)
            if name in pinned and pinned[name] in POOL_ROLES and pool[name] is not pinned[name]
        ]
        # 4. The allocation.
        times = step_times(stats, settings, previous)
        load = period_load(stats, times, settings.steps)
        pinned_in_pool = [pool[name] for name in pool if name in pinned]
        bounds = large_bounds(
            len(pool),
            pinned_large=pinned_in_pool.count(Role.LARGE),
            pinned_small=pinned_in_pool.count(Role.SMALL),
            limits=RoleLimits(
                min_large=settings.monitor_min_large,
                max_large=settings.monitor_max_large,
                min_small=settings.monitor_min_small,
                max_small=settings.monitor_max_small,
            ),
        )
        state = resume_state(*_previous_state(previous), bounds, _counts(pool)[0])
        gains = PidGains(settings.monitor_kp, settings.monitor_ki, settings.monitor_kd)
        allocation = allocate(load, mode=settings.monitor_mode, bounds=bounds, state=state, gains=gains)
        # 5. The moves.
        for name, role in choose_moves(pool, pinned, allocation.large).items():
            switches.append(_move(session, control, pool, name, role))
        # 6. The record.
        after = _counts(pool)
        decision = PoolDecision(
            mode=settings.monitor_mode.value,
            period_start=since,
            period_seconds=int((until - since).total_seconds()),
            inputs=_inputs(stats, times, load, bounds, pinned_in_pool),
            heuristic_large=allocation.heuristic,
            controlled_large=allocation.state.controlled,
            pid_integral=allocation.state.integral,
            pid_error=allocation.state.error,
            large_before=before[0],
            small_before=before[1],
            target_large=allocation.large,
            target_small=allocation.small,
            applied_large=after[0],
            applied_small=after[1],
            switches=switches,
        )
        pool_decisions.add_decision(session, decision)
        session.flush()
    log.info(
        "pool monitor: %s mode, target %d large / %d small, now %d / %d (%d moves)",
        decision.mode,
        decision.target_large,
        decision.target_small,
        decision.applied_large,
        decision.applied_small,
        len(switches),
    )
    return decision


def _counts(pool: dict[str, Role]) -> tuple[int, int]:
    roles = list(pool.values())
    return roles.count(Role.LARGE), roles.count(Role.SMALL)


def _move(
    session: Session, control: PoolControl, pool: dict[str, Role], name: str, role: Role
) -> dict[str, Any]:
    """Ask one worker to move; on acceptance update `pool` and its row."""
    previous = pool[name]
    accepted = control.switch(name, role)
    if accepted:
        pool[name] = role
        worker_roles.record_role(session, worker_name=name, role=role)
    return {"worker": name, "from": previous.value, "to": role.value, "ok": accepted}


def _previous_state(previous: PoolDecision | None) -> tuple[PidState | None, LargeBounds | None]:
    if previous is None:
        return None, None
    recorded = previous.inputs.get("bounds")
    bounds = LargeBounds(*recorded) if isinstance(recorded, list) and len(recorded) == 3 else None
    return PidState(previous.controlled_large, previous.pid_integral, previous.pid_error), bounds


def _inputs(
    stats: PeriodStats, times: StepTimes, load: PoolLoad | None, bounds: LargeBounds, pinned: list[Role]
) -> dict[str, Any]:
    return {
        "arrivals": stats.cache.arrivals,
        "request_rate": stats.request_rate,
        "hit_rate": stats.cache.hit_rate,
        "k_rates": {str(k): rate for k, rate in stats.k_rates.items()},
        "steps": load.steps if load is not None else None,
        "large_step_ms": times.large_ms,
        "small_step_ms": times.small_ms,
        "step_ms_sources": times.sources,
        "large_throughput": load.large_throughput if load is not None else None,
        "small_throughput": load.small_throughput if load is not None else None,
        "miss_workload": miss_workload(load) if load is not None else None,
        "hit_workload": hit_workload(load) if load is not None else None,
        "workers": bounds.workers,
        "pinned": {"large": pinned.count(Role.LARGE), "small": pinned.count(Role.SMALL)},
        "bounds": [bounds.workers, bounds.lo, bounds.hi],
    }
