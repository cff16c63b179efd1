"""The service's run of the pool monitor (MoDM 5.3, Algorithm 1): the beat task `reprise.rebalance_pools`.

One run, every settings.monitor_period_s, in one transaction; the chain is jobs.pools.loop's, with the
service's pools measured, moved and recorded here:
1. take the monitor's lock (one decision at a time, cluster-wide) and skip a period already decided;
2. measure: read the period's statistics (db.stats) and ask the broker which workers are alive and what
   they host (jobs.pools.actuator); bring worker_roles up to date with the answers (drop workers that
   stopped without a word); read the pins and the last decision's PID state (db.pools);
3. the loop moves pinned workers back, decides (jobs.pools.policy) and moves unpinned workers; each
   accepted move is recorded in worker_roles;
4. record the decision in pool_decisions, which the next run continues from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from core.settings import Settings
from core.vocabulary import Role
from db import pools as db_pools
from db.engine import session_scope
from db.models import CascadeDecision, PoolDecision
from db.stats import DEFAULT_PERIOD_SECONDS, PeriodStats, stats_between
from jobs.hosts import spanned_hosts_warning
from jobs.pools.actuator import PoolActuator
from jobs.pools.loop import Measurement, MonitorConfig, PeriodDecision, run_period
from jobs.pools.policy import (
    POOL_ROLES,
    LargeBounds,
    PidState,
    PoolLoad,
    hit_workload,
    miss_workload,
    throughput_per_worker,
)
from jobs.queues import settings_hits_need_large

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Per-step milliseconds of each model, and where each came from."""

    large_ms: float | None
    small_ms: float | None
    sources: dict[str, str]


def step_times(
    stats: PeriodStats, settings: Settings, previous: PoolDecision | CascadeDecision | None
) -> StepTimes:
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


def period_load(
    stats: PeriodStats, times: StepTimes, steps: int, *, hits_on_large: bool = False
) -> PoolLoad | None:
    """Algorithm 1's inputs, rates per second; None while no model's speed is known.

    The statistics count a hit that ran as a miss as a miss (db.stats.correct_hit_to_miss). When only
    large workers can serve hits (jobs.queues.hits_need_large), a hit is large-pool work for its T-k
    steps: Algorithm 1 gets it as a fraction (1 - k/T) of a miss, and no hit for the small pool."""
    if times.large_ms is None or times.small_ms is None:
        return None
    hit_rate, k_rates, request_rate = stats.cache.hit_rate or 0.0, stats.k_rates, stats.request_rate
    if hits_on_large:
        remaining = sum(rate * (1.0 - k / steps) for k, rate in k_rates.items())
        request_rate *= 1.0 - hit_rate + hit_rate * remaining
        hit_rate, k_rates = 0.0, {}
    return PoolLoad(
        request_rate=request_rate,
        hit_rate=hit_rate,
        k_rates=k_rates,
        steps=steps,
        large_throughput=throughput_per_worker(times.large_ms, steps),
        small_throughput=throughput_per_worker(times.small_ms, steps),
    )


def survey_pool(
    session: Session, actuator: PoolActuator, settings: Settings
) -> tuple[dict[str, Role], dict[str, Role]]:
    """The large and small workers alive, by name, with what each hosts, and the operator's pins.

    Asks the broker who is alive, brings worker_roles up to date with the answers and drops the workers
    that stopped without a word; warns when they span hosts under a local blob store (jobs.hosts). Both
    pool controllers (MoDM's monitor, DiffServe's MILP) start here."""
    live = actuator.roles()
    warning = spanned_hosts_warning(settings, live)
    if warning is not None:
        log.warning("pool monitor: %s", warning)
    for name, role in live.items():
        db_pools.record_role(session, worker_name=name, role=role)
    db_pools.forget_all_but(session, alive=live)
    pool = {name: role for name, role in live.items() if role in POOL_ROLES}
    return pool, db_pools.pinned_workers(session)


def last_window(session: Session, period_s: int) -> tuple[datetime, datetime]:
    """The last `period_s` seconds of complete statistics intervals, by the database's clock."""
    now = db_pools.database_now(session)
    bin_s = DEFAULT_PERIOD_SECONDS
    until = datetime.fromtimestamp(int(now.timestamp()) // bin_s * bin_s, UTC)
    return until - timedelta(seconds=period_s), until


def rebalance_pools(
    settings: Settings, actuator: PoolActuator, *, window: tuple[datetime, datetime] | None = None
) -> PoolDecision | None:
    """One run of the monitor (see the module docstring); the decision recorded, or None when there
    was nothing to decide (another run holds the lock, the period is decided, no pool worker answered).

    `window` replaces the last monitoring period (tests, and operators replaying a stretch of time)."""
    with session_scope(settings) as session:
        pools = ServicePools(session, settings, actuator, window=window)
        run_period(MonitorConfig.from_settings(settings), pools)
        decision = pools.recorded
    if decision is None:
        return None
    log.info(
        "pool monitor: %s mode, target %d large / %d small, now %d / %d (%d moves)",
        decision.mode,
        decision.target_large,
        decision.target_small,
        decision.applied_large,
        decision.applied_small,
        len(decision.switches),
    )
    return decision


@dataclass(frozen=True, slots=True)
class _Period:
    since: datetime
    until: datetime
    stats: PeriodStats
    times: StepTimes


class ServicePools:
    """The service's pools for one run of the monitor (jobs.pools.loop.MonitoredPools), inside the
    transaction that holds the monitor's lock."""

    def __init__(
        self,
        session: Session,
        settings: Settings,
        actuator: PoolActuator,
        *,
        window: tuple[datetime, datetime] | None = None,
    ) -> None:
        self.session, self.settings, self.actuator, self.window = session, settings, actuator, window
        self.period: _Period | None = None
        self.recorded: PoolDecision | None = None

    def measure(self) -> Measurement | None:
        """Steps 1 and 2 of the module docstring; None when there is nothing to decide."""
        session = self.session
        if not db_pools.lock_monitor(session):
            log.info("pool monitor: another decision is running")
            return None
        since, until = self.window or last_window(session, self.settings.monitor_period_s)
        previous = db_pools.latest_decision(session)
        if self.window is None and previous is not None and previous.period_start == since:
            return None
        stats = stats_between(session, since=since, until=until)
        pool, pinned = survey_pool(session, self.actuator, self.settings)
        if not pool:
            log.warning("pool monitor: no large or small worker answered; nothing to rebalance")
            return None
        times = step_times(stats, self.settings, previous)
        self.period = _Period(since, until, stats, times)
        memory, memory_bounds = _previous_state(previous)
        load = period_load(
            stats, times, self.settings.steps, hits_on_large=settings_hits_need_large(self.settings)
        )
        return Measurement(load, pool, pinned, memory=memory, memory_bounds=memory_bounds)

    def actuate(self, worker: str, role: Role) -> bool:
        """Ask the worker to move; an accepted move is recorded in worker_roles."""
        accepted = self.actuator.switch(worker, role)
        if accepted:
            db_pools.record_role(self.session, worker_name=worker, role=role)
        return accepted

    def record(self, decision: PeriodDecision) -> None:
        """Step 4: the decision's row in pool_decisions."""
        if self.period is None:
            raise RuntimeError("a decision is recorded after a measurement")
        period, allocation = self.period, decision.allocation
        self.recorded = PoolDecision(
            mode=decision.mode.value,
            period_start=period.since,
            period_seconds=int((period.until - period.since).total_seconds()),
            inputs=_inputs(period.stats, period.times, decision.load, decision.bounds, decision.pinned),
            heuristic_large=allocation.heuristic,
            controlled_large=allocation.state.controlled,
            pid_integral=allocation.state.integral,
            pid_error=allocation.state.error,
            large_before=decision.before[0],
            small_before=decision.before[1],
            target_large=allocation.large,
            target_small=allocation.small,
            applied_large=decision.after[0],
            applied_small=decision.after[1],
            switches=[switch.as_json() for switch in decision.switches],
        )
        db_pools.add_decision(self.session, self.recorded)
        self.session.flush()


def _previous_state(previous: PoolDecision | None) -> tuple[PidState | None, LargeBounds | None]:
    if previous is None:
        return None, None
    recorded = previous.inputs.get("bounds")
    bounds = LargeBounds(*recorded) if isinstance(recorded, list) and len(recorded) == 3 else None
    return PidState(previous.controlled_large, previous.pid_integral, previous.pid_error), bounds


def _inputs(
    stats: PeriodStats,
    times: StepTimes,
    load: PoolLoad | None,
    bounds: LargeBounds,
    pinned: tuple[int, int],
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
        "pinned": {"large": pinned[0], "small": pinned[1]},
        "bounds": [bounds.workers, bounds.lo, bounds.hi],
    }
