"""The pools' record on the real database: roles recorded and kept, pins honoured, stopped workers
forgotten; the monitor's lock and its latest decision."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import delete

from core.settings import Settings
from core.vocabulary import Role
from db import pools
from db.engine import session_scope
from db.models import PoolDecision, WorkerRoleRow

pytestmark = pytest.mark.integration


@pytest.fixture
def names(db_settings: Settings) -> Iterator[list[str]]:
    """Worker names of this test only; their rows go after (the table is shared by the session)."""
    made = [f"w{i}-{uuid.uuid4().hex[:8]}@host" for i in range(3)]
    yield made
    with session_scope(db_settings) as session:
        session.execute(delete(WorkerRoleRow).where(WorkerRoleRow.worker_name.in_(made)))


def _rows(settings: Settings, names: list[str]) -> dict[str, pools.RecordedWorker]:
    with session_scope(settings) as session:
        return {row.worker_name: row for row in pools.recorded_workers(session) if row.worker_name in names}


def test_a_role_change_moves_since_and_a_repeat_does_not(db_settings: Settings, names: list[str]) -> None:
    with session_scope(db_settings) as session:
        pools.record_role(session, worker_name=names[0], role=Role.LARGE)
    first = _rows(db_settings, names)[names[0]]
    with session_scope(db_settings) as session:
        pools.record_role(session, worker_name=names[0], role=Role.LARGE)
    assert _rows(db_settings, names)[names[0]].since == first.since
    with session_scope(db_settings) as session:
        pools.record_role(session, worker_name=names[0], role=Role.SMALL)
    moved = _rows(db_settings, names)[names[0]]
    assert (moved.role, moved.pinned) == (Role.SMALL, False) and moved.since > first.since


def test_a_pin_outlives_the_worker_and_is_not_overwritten(db_settings: Settings, names: list[str]) -> None:
    pinned, free = names[0], names[1]
    with session_scope(db_settings) as session:
        pools.pin_role(session, worker_name=pinned, role=Role.SMALL)  # before the worker ever ran
        pools.record_role(session, worker_name=free, role=Role.LARGE)
    with session_scope(db_settings) as session:
        assert pools.pinned_role(session, worker_name=pinned) is Role.SMALL
        assert pools.pinned_role(session, worker_name=free) is None
        # The worker reports another role (it has not moved yet): the pin's role stays the record.
        pools.record_role(session, worker_name=pinned, role=Role.LARGE)
        pools.forget(session, worker_name=pinned)
        pools.forget(session, worker_name=free)
    rows = _rows(db_settings, names)
    assert set(rows) == {pinned} and (rows[pinned].role, rows[pinned].pinned) == (Role.SMALL, True)
    with session_scope(db_settings) as session:
        assert pools.unpin(session, worker_name=pinned)
        assert not pools.unpin(session, worker_name=names[2])
    assert not _rows(db_settings, names)[pinned].pinned


def test_workers_that_stopped_without_a_word_are_forgotten_unless_pinned(
    db_settings: Settings, names: list[str]
) -> None:
    with session_scope(db_settings) as session:
        pools.record_role(session, worker_name=names[0], role=Role.LARGE)
        pools.record_role(session, worker_name=names[1], role=Role.SMALL)
        pools.pin_role(session, worker_name=names[2], role=Role.LARGE)
    with session_scope(db_settings) as session:
        # Only names[0] answered; other tests' workers are not alive either, so count only ours.
        pools.forget_all_but(session, alive=[names[0]])
    assert set(_rows(db_settings, names)) == {names[0], names[2]}
    with session_scope(db_settings) as session:
        assert {n: r for n, r in pools.pinned_workers(session).items() if n in names} == {
            names[2]: Role.LARGE
        }


def test_one_monitor_at_a_time_and_the_latest_decision(db_settings: Settings) -> None:
    with session_scope(db_settings) as holder:
        assert pools.lock_monitor(holder)
        with session_scope(db_settings) as other:
            assert not pools.lock_monitor(other)  # another decision is running
    with session_scope(db_settings) as session:
        assert pools.lock_monitor(session)  # released with the holder's transaction
        row = pools.add_decision(session, _decision())
        session.flush()
        assert pools.latest_decision(session) is row
        assert pools.database_now(session).tzinfo is not None
        session.rollback()  # leave no decision behind


def _decision() -> PoolDecision:
    return PoolDecision(
        mode="throughput",
        period_start=datetime(2000, 1, 1, tzinfo=UTC),
        period_seconds=60,
        inputs={},
        heuristic_large=None,
        controlled_large=1.0,
        pid_integral=0.0,
        pid_error=None,
        large_before=1,
        small_before=0,
        target_large=1,
        target_small=0,
        applied_large=1,
        applied_small=0,
        switches=[],
    )
