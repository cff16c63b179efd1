"""worker_roles on the real database: roles recorded and kept, pins honoured, stopped workers forgotten."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import delete

from core.settings import Settings
from core.vocabulary import Role
from db import worker_roles
from db.engine import session_scope
from db.models import WorkerRole

pytestmark = pytest.mark.integration


@pytest.fixture
def names(db_settings: Settings) -> Iterator[list[str]]:
    """Worker names of this test only; their rows go after (the table is shared by the session)."""
    made = [f"w{i}-{uuid.uuid4().hex[:8]}@host" for i in range(3)]
    yield made
    with session_scope(db_settings) as session:
        session.execute(delete(WorkerRole).where(WorkerRole.worker_name.in_(made)))


def _rows(settings: Settings, names: list[str]) -> dict[str, worker_roles.WorkerRoleRow]:
    with session_scope(settings) as session:
        return {row.worker_name: row for row in worker_roles.list_roles(session) if row.worker_name in names}


def test_a_role_change_moves_since_and_a_repeat_does_not(db_settings: Settings, names: list[str]) -> None:
    with session_scope(db_settings) as session:
        worker_roles.record_role(session, worker_name=names[0], role=Role.LARGE)
    first = _rows(db_settings, names)[names[0]]
    with session_scope(db_settings) as session:
        worker_roles.record_role(session, worker_name=names[0], role=Role.LARGE)
    assert _rows(db_settings, names)[names[0]].since == first.since
    with session_scope(db_settings) as session:
        worker_roles.record_role(session, worker_name=names[0], role=Role.SMALL)
    moved = _rows(db_settings, names)[names[0]]
    assert (moved.role, moved.pinned) == (Role.SMALL, False) and moved.since > first.since


def test_a_pin_outlives_the_worker_and_is_not_overwritten(db_settings: Settings, names: list[str]) -> None:
    pinned, free = names[0], names[1]
    with session_scope(db_settings) as session:
        worker_roles.pin_role(session, worker_name=pinned, role=Role.SMALL)  # before the worker ever ran
        worker_roles.record_role(session, worker_name=free, role=Role.LARGE)
    with session_scope(db_settings) as session:
        assert worker_roles.pinned_role(session, worker_name=pinned) is Role.SMALL
        assert worker_roles.pinned_role(session, worker_name=free) is None
        # The worker reports another role (it has not moved yet): the pin's role stays the record.
        worker_roles.record_role(session, worker_name=pinned, role=Role.LARGE)
        worker_roles.forget(session, worker_name=pinned)
        worker_roles.forget(session, worker_name=free)
    rows = _rows(db_settings, names)
    assert set(rows) == {pinned} and (rows[pinned].role, rows[pinned].pinned) == (Role.SMALL, True)
    with session_scope(db_settings) as session:
        assert worker_roles.unpin(session, worker_name=pinned)
        assert not worker_roles.unpin(session, worker_name=names[2])
    assert not _rows(db_settings, names)[pinned].pinned


def test_workers_that_stopped_without_a_word_are_forgotten_unless_pinned(
    db_settings: Settings, names: list[str]
) -> None:
    with session_scope(db_settings) as session:
        worker_roles.record_role(session, worker_name=names[0], role=Role.LARGE)
        worker_roles.record_role(session, worker_name=names[1], role=Role.SMALL)
        worker_roles.pin_role(session, worker_name=names[2], role=Role.LARGE)
    with session_scope(db_settings) as session:
        # Only names[0] answered; other tests' workers are not alive either, so count only ours.
        worker_roles.forget_all_but(session, alive=[names[0]])
    assert set(_rows(db_settings, names)) == {names[0], names[2]}
