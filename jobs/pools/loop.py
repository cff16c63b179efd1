"""One period of the pool monitor, chained once: measure -> pin -> decide -> actuate -> record.

The chain is the same for the service and the simulator; what differs is injected as `MonitoredPools`:
- measure: the period's load (MoDM Algorithm 1's inputs), the large and small workers alive and what
  each hosts, the operator's pins, and the PID memory of the last decision;
- actuate: ask one worker to move to the other pool (it may refuse);
- record: keep the decision, which the next period continues from.
The service's side is jobs.pools.rebalance (Postgres statistics, Celery remote control, pool_decisions);
the simulator's is bench.sim.monitor (counted arrivals, targets per role, memory). The decision itself is
jobs.pools.policy, which this module only calls, in order:
1. pinned workers that are not in their pinned pool move back to it first (the operator's word);
2. the bounds on N_large (pins, Algorithm 1 line 29, the configured limits) and the allocation, from
   the last decision's PID state while the pool is the same;
3. the fewest unpinned workers move to reach it.
Nothing here does I/O itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.settings import Settings
from core.vocabulary import MonitorMode, Role
from jobs.pools.policy import (
    POOL_ROLES,
    Allocation,
    LargeBounds,
    PidGains,
    PidState,
    PoolLoad,
    RoleLimits,
    allocate,
    choose_moves,
    large_bounds,
    resume_state,
)


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    """How the monitor decides: the mode (MoDM 5.3.1 or 5.3.2), the PID gains and the per-role limits."""

    mode: MonitorMode
    gains: PidGains = field(default_factory=PidGains)
    limits: RoleLimits = field(default_factory=RoleLimits)

    @classmethod
    def from_settings(cls, settings: Settings, *, mode: MonitorMode | None = None) -> MonitorConfig:
        """The service's configuration (MoDM 5.3 defaults); `mode` replaces settings.monitor_mode."""
        return cls(
            mode=mode if mode is not None else settings.monitor_mode,
            gains=PidGains(settings.monitor_kp, settings.monitor_ki, settings.monitor_kd),
            limits=RoleLimits(
                min_large=settings.monitor_min_large,
                max_large=settings.monitor_max_large,
                min_small=settings.monitor_min_small,
                max_small=settings.monitor_max_small,
            ),
        )


@dataclass(frozen=True, slots=True)
class Measurement:
    """What one period asked of the pools and who is there to serve it.

    load: Algorithm 1's inputs; None while the models' speeds are unknown (the pool then holds).
    pool: the large and small workers alive, by name, with the role each hosts now (not empty).
    pinned: the operator's pins by worker name (workers not alive may be among them).
    memory, memory_bounds: the last decision's PID state and the bounds it was taken in (None: none)."""

    load: PoolLoad | None
    pool: Mapping[str, Role]
    pinned: Mapping[str, Role]
    memory: PidState | None = None
    memory_bounds: LargeBounds | None = None


@dataclass(frozen=True, slots=True)
class Switch:
    """One move asked of a worker, and whether it accepted."""

    worker: str
    source: Role
    destination: Role
    ok: bool

    def as_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "from": self.source.value, "to": self.destination.value, "ok": self.ok}


@dataclass(frozen=True, slots=True)
class PeriodDecision:
    """One period's decision and what came of it. before, after: (large, small) workers before any
    move and after the accepted ones; pinned: (large, small) pinned workers in the pool."""

    mode: MonitorMode
    load: PoolLoad | None
    bounds: LargeBounds
    allocation: Allocation
    before: tuple[int, int]
    after: tuple[int, int]
    pinned: tuple[int, int]
    switches: tuple[Switch, ...]


class MonitoredPools(Protocol):
    """The side of the pools a monitor measures, moves and records: the service's or the simulator's."""

    def measure(self) -> Measurement | None:
        """The period; None when there is nothing to decide (the loop then does nothing)."""
        ...

    def actuate(self, worker: str, role: Role) -> bool:
        """Ask `worker` to host `role`; True when it accepted."""
        ...

    def record(self, decision: PeriodDecision) -> None: ...


def run_period(config: MonitorConfig, pools: MonitoredPools) -> PeriodDecision | None:
    """One period of the monitor (see the module docstring); None when `pools` measured nothing."""
    measured = pools.measure()
    if measured is None:
        return None
    pool = dict(measured.pool)
    before = counts(pool)
    # The operator's word first: pinned workers go back to their pool.
    switches = [
        _move(pools, pool, name, measured.pinned[name])
        for name in sorted(pool)
        if name in measured.pinned
        and measured.pinned[name] in POOL_ROLES
        and pool[name] is not measured.pinned[name]
    ]
    pinned_in_pool = [pool[name] for name in pool if name in measured.pinned]
    pinned = (pinned_in_pool.count(Role.LARGE), pinned_in_pool.count(Role.SMALL))
    bounds = large_bounds(len(pool), pinned_large=pinned[0], pinned_small=pinned[1], limits=config.limits)
    state = resume_state(measured.memory, measured.memory_bounds, bounds, counts(pool)[0])
    allocation = allocate(measured.load, mode=config.mode, bounds=bounds, state=state, gains=config.gains)
    for name, role in choose_moves(pool, measured.pinned, allocation.large).items():
        switches.append(_move(pools, pool, name, role))
    decision = PeriodDecision(
        mode=config.mode,
        load=measured.load,
        bounds=bounds,
        allocation=allocation,
        before=before,
        after=counts(pool),
        pinned=pinned,
        switches=tuple(switches),
    )
    pools.record(decision)
    return decision


def counts(pool: Mapping[str, Role]) -> tuple[int, int]:
    """(large, small) workers in `pool`."""
    roles = list(pool.values())
    return roles.count(Role.LARGE), roles.count(Role.SMALL)


def _move(pools: MonitoredPools, pool: dict[str, Role], name: str, role: Role) -> Switch:
    """Ask one worker to move; on acceptance `pool` says so."""
    source = pool[name]
    accepted = pools.actuate(name, role)
    if accepted:
        pool[name] = role
    return Switch(worker=name, source=source, destination=role, ok=accepted)
