"""The quality guard's pass: read the audits, estimate the drop per (similarity bin, k), and move the
guarded k table's thresholds (jobs/policies/quality_guard.py); every change is a row of
quality_guard_decisions, and admission serves from the newest (`GuardedTables`, cached briefly).

The guarded table belongs to the configured one (`Settings.k_table` read for the lookup mode): a change
records the configured table it started from, and a deployment configured with another table starts
again from that table. The SQL is db/quality_guard.py's."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from core.errors import ThresholdTableError
from core.settings import Settings
from core.vocabulary import HitPolicy
from db import quality_guard as guard_db
from db.engine import session_scope
from jobs.admission import scale_k
from jobs.policies.k_selection import ThresholdTable, configured_table, largest_stored_at_most, parse_table
from jobs.policies.quality_guard import (
    BIN_WIDTH,
    WINDOW,
    Audit,
    BinEstimate,
    GuardConfig,
    GuardDecision,
    adjust,
    estimate,
)

_LOCK = zlib.crc32(b"reprise.quality_guard")  # one pass at a time moves the table


def guard_config(settings: Settings) -> GuardConfig:
    return GuardConfig(
        target=settings.quality_drop_target,
        hysteresis=settings.quality_guard_hysteresis,
        min_sample=settings.quality_guard_min_sample,
    )


def served_ks(settings: Settings, table: ThresholdTable) -> dict[int, int]:
    """Each row's profiled k as its hits skip it here, the k audits record: scaled to the configured T
    (jobs.admission.scale_k) and, for NIRVANA's resume, down to the largest captured state (5.4)."""
    served: dict[int, int] = {}
    for row in table.rows:
        k = scale_k(row.k, settings.steps)
        if k is not None and settings.hit_policy is HitPolicy.RESUME:
            k = largest_stored_at_most(k, settings.capture_steps)
        if k is not None:
            served[row.k] = k
    return served


def guarded_table(session: Session, base: ThresholdTable) -> ThresholdTable:
    """The table admission serves from: the newest change made for `base`, or `base` itself."""
    decision = guard_db.latest_decision(session, base.describe())
    if decision is None:
        return base
    try:
        rows = parse_table(decision.table).rows
        return ThresholdTable(
            name=f"{base.name} (guarded)",
            rows=rows,
            comparison=base.comparison,
            source=f"the quality guard, from {base.name}",
            mode=base.mode,
            profiled_with=base.profiled_with,
        )
    except ThresholdTableError:
        return base


def run_guard(settings: Settings) -> GuardDecision | None:
    """One pass: None when the guard is off or nothing was audited yet; otherwise the decision, stored
    when it changed the table."""
    if not settings.quality_guard:
        return None
    base = configured_table(settings)
    with session_scope(settings) as session:
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK})
        scorer = guard_db.summary(session).scorer
        if scorer is None:
            return None
        audits = guard_db.windowed_audits(
            session, steps=settings.steps, scorer=scorer, bin_width=BIN_WIDTH, window=WINDOW
        )
        estimates = estimate(Audit(a.similarity, a.k, a.drop) for a in audits)
        current = guarded_table(session, base)
        decision = adjust(current, base, estimates, served_ks(settings, base), guard_config(settings))
        if decision.changed:
            guard_db.record_decision(
                session,
                base_table=base.describe(),
                table=decision.table.describe(),
                target=settings.quality_drop_target,
                audits=len(audits),
                changes=[asdict(change) for change in decision.changes],
                estimates=bins_json(estimates.values()),
            )
    return decision


def bins_json(estimates: Iterable[BinEstimate]) -> list[dict[str, Any]]:
    """Estimates as JSON rows, as stats and decisions show them: {similarity_lo, similarity_hi, k, n,
    drop_mean}."""
    return [
        {"similarity_lo": e.lo, "similarity_hi": e.hi, "k": e.k, "n": e.n, "drop_mean": round(e.drop_mean, 4)}
        for e in sorted(estimates, key=lambda e: (e.index, e.k))
    ]


class GuardedTables:
    """The guarded table as admission reads it: from the database at most once per `ttl_s` per
    process (Settings.quality_guard_cache_s), the configured table while the guard is off."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: tuple[float, str, ThresholdTable] | None = None

    def get(self, settings: Settings) -> ThresholdTable:
        base = configured_table(settings)
        if not settings.quality_guard:
            return base
        now = time.monotonic()
        with self._lock:
            cached = self._cached
        if (
            cached is not None
            and cached[1] == base.describe()
            and now - cached[0] < settings.quality_guard_cache_s
        ):
            return cached[2]
        with session_scope(settings) as session:
            table = guarded_table(session, base)
        with self._lock:
            self._cached = (now, base.describe(), table)
        return table
