"""A worker's record, kept by its main process: it starts in its pinned pool, records its role when
ready and forgets it when it stops; every session it opens leaves no connection behind for a child."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from celery.signals import worker_ready, worker_shutdown
from sqlalchemy import delete

from core.settings import Settings
from core.vocabulary import Role
from db import pools
from db.engine import session_scope
from db.models import WorkerRoleRow
from workers.registry import keep_record, starting_role

pytestmark = pytest.mark.integration


@pytest.fixture
def name(db_settings: Settings) -> Iterator[str]:
    made = f"gpu-{uuid.uuid4().hex[:8]}@host"
    yield made
    with session_scope(db_settings) as session:
        session.execute(delete(WorkerRoleRow).where(WorkerRoleRow.worker_name == made))


def _recorded(settings: Settings, name: str) -> pools.RecordedWorker | None:
    with session_scope(settings) as session:
        return next((row for row in pools.recorded_workers(session) if row.worker_name == name), None)


def test_a_pool_worker_starts_in_the_pool_it_is_pinned_to(db_settings: Settings, name: str) -> None:
    assert starting_role(db_settings, worker_name=name, role=Role.LARGE) is Role.LARGE
    with session_scope(db_settings) as session:
        pools.pin_role(session, worker_name=name, role=Role.SMALL)
    assert starting_role(db_settings, worker_name=name, role=Role.LARGE) is Role.SMALL
    assert starting_role(db_settings, worker_name=name, role=Role.DECODE) is Role.DECODE  # not a pool role


def test_an_unreachable_database_does_not_stop_a_worker_from_starting(db_settings: Settings) -> None:
    nowhere = db_settings.model_copy(update={"database_url": "postgresql+psycopg://x@127.0.0.1:1/none"})
    if nowhere.sqlalchemy_url == db_settings.sqlalchemy_url:
        pytest.skip("the settings do not take database_url")
    assert starting_role(nowhere, worker_name="any@host", role=Role.SMALL) is Role.SMALL


def test_the_record_follows_the_worker_from_ready_to_shutdown(db_settings: Settings, name: str) -> None:
    before = {signal: list(signal.receivers) for signal in (worker_ready, worker_shutdown)}
    try:
        keep_record(db_settings, worker_name=name, role=Role.SMALL)
        worker_ready.send(sender=None)
        recorded = _recorded(db_settings, name)
        assert recorded is not None and (recorded.role, recorded.pinned) == (Role.SMALL, False)
        worker_shutdown.send(sender=None)
        assert _recorded(db_settings, name) is None
    finally:  # this process is no worker: drop the receivers keep_record connected
        for signal, receivers in before.items():
            signal.receivers = receivers
