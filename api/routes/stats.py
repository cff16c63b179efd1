"""/v1/stats: what the cache and the pools are doing, read from Postgres and the broker.

A tenant's key sees its own jobs only; the service-wide figures (every tenant's jobs, queues, pools,
the pool monitor, decodes, intervals) need an admin key: no tenant learns another's traffic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from redis.exceptions import RedisError

from api.deps import CallerDep, SessionDep, StateDep
from api.problems import Problem
from api.quality_guard import guard_view
from api.read_metrics import read_nodes_view
from api.routing import ReleasingRoute
from api.schemas import (
    CacheStats,
    CascadeDecisionView,
    CascadeView,
    ComputeStats,
    DecodeStats,
    IntervalRow,
    LookupView,
    MonitorView,
    PoolDecisionView,
    QualityStats,
    ReadsView,
    Stats,
    problem_responses,
)
from core.settings import Settings
from db import cascade as cascade_db
from db import jobs as jobs_db
from db.models import PoolDecision
from db.pools import latest_decision, workers_per_role
from db.stats import decode_summary, recent_intervals
from jobs.policies.cascade import feature_kind_for
from jobs.policies.k_selection import configured_table, embedder_tag
from jobs.queues import Queue, queue_depth

router = APIRouter(prefix="/v1/stats", tags=["stats"], route_class=ReleasingRoute)

RECENT_INTERVALS = 12


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


StatsScope = Literal["tenant", "global"]


@router.get("", responses=problem_responses(401, 403, 422))
def get_stats(
    caller: CallerDep,
    session: SessionDep,
    state: StateDep,
    window_s: Annotated[int, Query(ge=60, le=30 * 86400, description="Look back this many seconds.")] = 3600,
    scope: Annotated[
        StatsScope | None,
        Query(
            description="tenant: the caller's own jobs only. global: every tenant, plus queues, pools, the "
            "pool monitor, decodes and interval aggregates; needs an admin key (`reprise keys create "
            "--admin`). Default: global for an admin key, tenant otherwise."
        ),
    ] = None,
) -> Stats:
    """Hit rate, k histogram and compute saved of the caller's jobs; with an admin key, of the whole
    service, with queue depths, pool sizes and the pool monitor. A tenant never sees another's traffic."""
    chosen: StatsScope = scope or ("global" if caller.admin else "tenant")
    if chosen == "global" and not caller.admin:
        raise Problem(403, "service-wide figures need an admin API key", slug="forbidden")
    since = datetime.now(UTC) - timedelta(seconds=window_s)
    tenant_id = None if chosen == "global" else caller.tenant.id
    outcomes = jobs_db.cache_outcomes(session=session, since=since, tenant_id=tenant_id)
    stats = Stats(
        scope=chosen,
        window_s=window_s,
        since=since,
        jobs=jobs_db.status_counts(session=session, since=since, tenant_id=tenant_id),
        cache=CacheStats(
            hits=outcomes.hits,
            misses=outcomes.misses,
            hit_rate=_ratio(outcomes.hits, outcomes.hits + outcomes.misses),
            k_histogram={str(k): n for k, n in outcomes.k_histogram.items()},
        ),
        compute=ComputeStats(
            steps_requested=outcomes.steps_requested,
            steps_skipped=outcomes.steps_skipped,
            saved_fraction=_ratio(outcomes.steps_skipped, outcomes.steps_requested),
            denoiser_evaluations=outcomes.denoiser_evaluations,
        ),
        quality=QualityStats(
            judged=outcomes.judged,
            hit_mean=None if outcomes.hit_quality is None else round(outcomes.hit_quality, 4),
            miss_mean=None if outcomes.miss_quality is None else round(outcomes.miss_quality, 4),
        ),
        queues={},
        pools={},
        pool_monitor=None,
        monitor=None,
        lookup=None,
        decodes=None,
        cascade=None,
        reads=None,
        quality_guard=None,
        intervals=[],
    )
    return _with_service_figures(stats, session, state, since) if chosen == "global" else stats


def _with_service_figures(stats: Stats, session: SessionDep, state: StateDep, since: datetime) -> Stats:
    """The operator's part: queues, pools, the monitor, decodes and the interval aggregates."""
    decodes = decode_summary(session, since=since)
    return stats.model_copy(
        update={
            "queues": {queue.value: queue_depth(state.redis, queue) for queue in Queue},
            "pools": workers_per_role(session),
            "pool_monitor": _decision_view(latest_decision(session)),
            "monitor": MonitorView(
                enabled=state.settings.monitor_enabled,
                mode=state.settings.monitor_mode.value,
                period_s=state.settings.monitor_period_s,
                cohost=state.settings.cohosting,
            ),
            "lookup": _lookup_view(state.settings),
            "decodes": DecodeStats(
                generations=decodes.generations,
                generation_decodes=decodes.generation_decodes,
                per_job=None if decodes.per_job is None else round(decodes.per_job, 4),
                image_reads=decodes.image_reads,
                read_decodes=decodes.read_decodes,
                per_read=None if decodes.per_read is None else round(decodes.per_read, 4),
            ),
            "cascade": _cascade_view(session, state, since),
            "reads": _reads_view(session, state),
            "quality_guard": guard_view(session, state.settings),
            "intervals": [
                IntervalRow(
                    period_start=row.period_start,
                    period_seconds=row.period_seconds,
                    arrivals=row.arrivals,
                    hits=row.hits,
                    misses=row.misses,
                    predicted_misses=row.predicted_misses,
                )
                for row in recent_intervals(session, RECENT_INTERVALS)
            ],
        }
    )


def _lookup_view(settings: Settings) -> LookupView:
    return LookupView(
        lookup=settings.lookup_mode.value,
        hit_policy=settings.hit_policy.value,
        k_table=configured_table(settings).name,
        embedder=embedder_tag(settings.text_embedder, settings.open_clip_model, settings.lookup_mode),
    )


def _reads_view(session: SessionDep, state: StateDep) -> ReadsView:
    settings = state.settings
    try:
        nodes = read_nodes_view(state.redis, session, heartbeat_s=settings.read_heartbeat_s)
    except RedisError:
        nodes = {}
    return ReadsView(
        nodes=nodes,
        spill_theta=settings.read_spill_theta,
        store=settings.read_store.value,
        delivery=settings.image_delivery.value,
        retention_days=settings.retention_days,
    )


def _cascade_view(session: SessionDep, state: StateDep, since: datetime) -> CascadeView:
    settings = state.settings
    counts = cascade_db.cascade_counts(session, since)
    threshold, source = cascade_db.current_threshold(session, default=settings.cascade_threshold)
    light = settings.model_source("small")
    discriminator = cascade_db.discriminator_summary(
        session, light_model=light, features=feature_kind_for(light).value
    )
    decision = cascade_db.latest_decision(session)
    return CascadeView(
        allocator=settings.allocator.value,
        threshold=threshold,
        threshold_source=source,
        light_stages=counts.light,
        escalated=counts.escalated,
        escalation_rate=_ratio(counts.escalated, counts.light),
        discriminator=discriminator,
        decision=None
        if decision is None
        else CascadeDecisionView(
            decided_at=decision.decided_at,
            period_start=decision.period_start,
            period_seconds=decision.period_seconds,
            threshold=decision.threshold,
            feasible=decision.feasible,
            objective=decision.objective,
            solve_ms=decision.solve_ms,
            target={"light": decision.target_light, "heavy": decision.target_heavy},
            applied={"light": decision.applied_light, "heavy": decision.applied_heavy},
            inputs=dict(decision.inputs),
            solution=dict(decision.solution),
            switches=list(decision.switches),
        ),
    )


def _decision_view(decision: PoolDecision | None) -> PoolDecisionView | None:
    if decision is None:
        return None
    return PoolDecisionView(
        decided_at=decision.decided_at,
        mode=decision.mode,
        period_start=decision.period_start,
        period_seconds=decision.period_seconds,
        request_rate=decision.inputs.get("request_rate"),
        hit_rate=decision.inputs.get("hit_rate"),
        heuristic_large=decision.heuristic_large,
        controlled_large=decision.controlled_large,
        before={"large": decision.large_before, "small": decision.small_before},
        target={"large": decision.target_large, "small": decision.target_small},
        applied={"large": decision.applied_large, "small": decision.applied_small},
        inputs=decision.inputs,
        switches=decision.switches,
    )
