"""The quality guard's pass on the real database: audits in, a tightened table out, stored as a
decision that admission's reader serves; nothing moves below the minimum sample or with the guard off."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, func, select

from core.settings import Settings
from core.vocabulary import HitPolicy, LookupMode
from db import quality_guard as guard_db
from db.engine import session_scope
from db.models import QualityAudit, QualityGuardDecision
from jobs.passes.quality_guard import GuardedTables, run_guard, served_ks
from jobs.policies.k_selection import NIRVANA_T2T

pytestmark = pytest.mark.integration

SCORER = "lab-judge"


@pytest.fixture
def guard_settings(db_settings: Settings) -> Iterator[Settings]:
    settings = db_settings.model_copy(
        update={
            "quality_guard": True,
            "quality_guard_min_sample": 4,
            "k_table": "nirvana-t2t",
            "lookup_mode": LookupMode.TEXT_TO_TEXT,
            "hit_policy": HitPolicy.RESUME,
            "steps": 50,
            "capture_steps": [5, 10, 15, 20, 25],
            "quality_guard_cache_s": 0.001,
        }
    )
    _clear(settings)
    yield settings
    _clear(settings)


def _clear(settings: Settings) -> None:
    with session_scope(settings) as session:
        session.execute(delete(QualityAudit))
        session.execute(delete(QualityGuardDecision))


def _audit(settings: Settings, similarity: float, k: int, hit: float, fresh: float, n: int) -> None:
    with session_scope(settings) as session:
        for _ in range(n):
            guard_db.record_audit(
                session,
                job_id=uuid.uuid4(),
                similarity=similarity,
                k=k,
                steps=settings.steps,
                hit_score=hit,
                fresh_score=fresh,
                scorer=SCORER,
            )


def _decisions(settings: Settings) -> int:
    with session_scope(settings) as session:
        return int(session.scalar(select(func.count()).select_from(QualityGuardDecision)) or 0)


def test_audits_over_the_target_tighten_the_table_that_admission_then_reads(guard_settings: Settings) -> None:
    settings = guard_settings
    tables = GuardedTables()
    assert run_guard(settings) is None  # nothing audited yet
    _audit(settings, 0.66, 5, hit=0.5, fresh=0.8, n=3)
    decision = run_guard(settings)
    assert decision is not None and not decision.changed  # below the minimum sample: held
    assert _decisions(settings) == 0 and tables.get(settings) == NIRVANA_T2T

    _audit(settings, 0.66, 5, hit=0.5, fresh=0.8, n=1)
    _audit(settings, 0.71, 5, hit=0.7, fresh=0.7, n=4)  # the next bin is fine: the row stops there
    decision = run_guard(settings)
    assert decision is not None and decision.changed
    assert decision.table.rows[-1].similarity == pytest.approx(0.675)
    with session_scope(settings) as session:
        stored = guard_db.latest_decision(session, NIRVANA_T2T.describe())
        assert stored is not None
        assert (stored.table, stored.audits, stored.target) == (decision.table.describe(), 8, 0.02)
        [change] = stored.changes
        assert (
            change["k"] == 5 and change["reason"] == "tighten" and change["drop_mean"] == pytest.approx(0.3)
        )
        assert {
            "similarity_lo": 0.65,
            "similarity_hi": 0.675,
            "k": 5,
            "n": 4,
            "drop_mean": 0.3,
        } in stored.estimates
    served = tables.get(settings)
    assert served.describe() == decision.table.describe() and served.name == "nirvana-t2t (guarded)"

    # Another pass on the same audits finds nothing more to move: no second row.
    assert not run_guard(settings).changed  # type: ignore[union-attr]
    assert _decisions(settings) == 1
    # The guard off: the configured table, exactly, and no pass.
    off = settings.model_copy(update={"quality_guard": False})
    assert GuardedTables().get(off) is NIRVANA_T2T and run_guard(off) is None
    # Another configured table does not read this one's decisions.
    other = settings.model_copy(update={"k_table": "0.9:20,0.8:10"})
    assert GuardedTables().get(other).describe() == ">0.9:20,>0.8:10"


def test_audits_of_another_scorer_or_schedule_are_not_mixed_in(guard_settings: Settings) -> None:
    settings = guard_settings
    _audit(settings, 0.66, 5, hit=0.5, fresh=0.9, n=4)
    short = settings.model_copy(update={"steps": 10, "capture_steps": [2, 4, 6, 8]})
    decision = run_guard(short)  # its audits are of 50-step runs
    assert decision is not None and not decision.changed
    with session_scope(settings) as session:
        session.add(
            QualityAudit(
                job_id=uuid.uuid4(),
                similarity=0.9,
                k=5,
                steps=50,
                hit_score=0.0,
                fresh_score=0.0,
                drop=0.0,
                scorer="clip-score",
            )
        )
    decision = run_guard(settings)  # the newest audit's scorer is CLIP score: the judge's are not read
    assert decision is not None and not decision.changed


def test_served_k_follows_the_schedule_and_the_captured_states(guard_settings: Settings) -> None:
    assert served_ks(guard_settings, NIRVANA_T2T) == {25: 25, 20: 20, 15: 15, 10: 10, 5: 5}
    short = guard_settings.model_copy(update={"steps": 10, "capture_steps": [2, 4, 6, 8]})
    # 5 of 50 is 1 of 10, and no state is captured at 1: that row's hits are misses there (NIRVANA 5.4).
    assert served_ks(short, NIRVANA_T2T) == {25: 4, 20: 4, 15: 2, 10: 2}


def test_beat_runs_the_pass_only_with_the_guard_on(guard_settings: Settings) -> None:
    from jobs.queues import TaskName
    from jobs.schedule import beat_schedule

    assert beat_schedule(guard_settings)["guard-quality"]["task"] == TaskName.GUARD_QUALITY.value
    assert "guard-quality" not in beat_schedule(guard_settings.model_copy(update={"quality_guard": False}))
