"""The quality guard as operators see it: the /v1/stats block and the Prometheus metrics, both read from
Postgres at request or scrape time (the audits, the newest change of the guarded k table)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy.orm import Session

from api.schemas import GuardBin, GuardChange, QualityGuardView
from core.settings import Settings
from db import quality_guard as guard_db
from jobs.passes.quality_guard import bins_json, guarded_table
from jobs.policies.k_selection import configured_table
from jobs.policies.quality_guard import BIN_WIDTH, WINDOW, Audit, estimate


def guard_view(session: Session, settings: Settings) -> QualityGuardView:
    """Target, estimate, the table in use and the last change, for /v1/stats."""
    base = configured_table(settings)
    summary = guard_db.summary(session)
    rows = (
        guard_db.windowed_audits(
            session, steps=settings.steps, scorer=summary.scorer, bin_width=BIN_WIDTH, window=WINDOW
        )
        if summary.scorer is not None
        else []
    )
    table = guarded_table(session, base) if settings.quality_guard else base
    latest = guard_db.latest_decision(session, base.describe())
    return QualityGuardView(
        enabled=settings.quality_guard,
        target=settings.quality_drop_target,
        audit_fraction=settings.quality_audit_fraction,
        scorer=summary.scorer,
        audits=summary.audits,
        drop_mean=round(sum(row.drop for row in rows) / len(rows), 4) if rows else None,
        configured_table=base.describe(),
        table=table.describe(),
        bins=[
            GuardBin(**row)
            for row in bins_json(estimate(Audit(r.similarity, r.k, r.drop) for r in rows).values())
        ],
        last_change=None
        if latest is None
        else GuardChange(
            decided_at=latest.decided_at,
            table=latest.table,
            audits=latest.audits,
            changes=list(latest.changes),
        ),
    )


def thresholds_in_use(session: Session, settings: Settings) -> dict[int, float]:
    """The similarity each k of the table admission serves from needs."""
    base = configured_table(settings)
    table = guarded_table(session, base) if settings.quality_guard else base
    return {row.k: row.similarity for row in table.rows}


def guard_families(view: QualityGuardView | None, thresholds: Mapping[int, float]) -> list[Metric]:
    """The guard's metrics from the figures /v1/stats shows (`guard_view`) and `thresholds_in_use`."""
    enabled = GaugeMetricFamily(
        "reprise_quality_guard_enabled", "1 when the quality guard holds the k table."
    )
    target = GaugeMetricFamily(
        "reprise_quality_guard_target", "The mean quality drop the guard holds per bin."
    )
    drop = GaugeMetricFamily(
        "reprise_quality_guard_drop_estimate",
        "Mean drop (fresh score - hit score) of the audits the guard's estimate keeps, every bin.",
    )
    audits = CounterMetricFamily("reprise_quality_guard_audits", "Hits audited, ever.")  # rows never deleted
    threshold = GaugeMetricFamily(
        "reprise_quality_guard_threshold",
        "The similarity each k of the table in use needs (the guard's newest table, or the configured one).",
        labels=["k"],
    )
    changed = GaugeMetricFamily(
        "reprise_quality_guard_last_change_timestamp_seconds",
        "When the guard last changed the table (Unix time).",
    )
    for k, similarity in thresholds.items():
        threshold.add_metric([str(k)], similarity)
    if view is not None:
        enabled.add_metric([], 1.0 if view.enabled else 0.0)
        target.add_metric([], view.target)
        drop.add_metric([], view.drop_mean if view.drop_mean is not None else float("nan"))
        audits.add_metric([], view.audits)
        if view.last_change is not None:
            changed.add_metric([], view.last_change.decided_at.timestamp())
    return [enabled, target, drop, audits, threshold, changed]
