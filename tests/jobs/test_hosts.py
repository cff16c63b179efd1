"""A local blob store is one host's disk: a worker refuses to start with one while a worker recorded on
another host answers (worker_roles on the real database, a ping told who answers), and the pool
monitor's warning names the hosts. The two-node stack that needs S3 is tests/e2e/test_two_nodes.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import delete

from core.errors import SettingsError
from core.settings import Settings
from core.vocabulary import BlobBackend, Role
from db import pools
from db.engine import session_scope
from db.models import WorkerRoleRow
from jobs.celery_app import make_celery_app
from jobs.hosts import (
    broker_ping,
    host_of,
    local_blobs_refusal,
    refuse_local_blobs_across_hosts,
    spanned_hosts_warning,
    workers_elsewhere,
)

pytestmark = pytest.mark.integration


def _s3(settings: Settings) -> Settings:
    return settings.model_copy(update={"blob_backend": BlobBackend.S3, "s3_bucket": "reprise"})


def _local(settings: Settings) -> Settings:
    return settings.model_copy(update={"blob_backend": BlobBackend.LOCAL})


@pytest.fixture
def hosts(db_settings: Settings) -> Iterator[tuple[str, str, list[str]]]:
    """This host, another, and three workers recorded in worker_roles: two there, one here (dropped after)."""
    here, there = f"here-{uuid.uuid4().hex[:6]}", f"there-{uuid.uuid4().hex[:6]}"
    names = [f"large-1@{there}", f"decode-2@{there}", f"io-3@{here}"]
    with session_scope(db_settings) as session:
        for name, role in zip(names, (Role.LARGE, Role.DECODE, Role.IO), strict=True):
            pools.record_role(session, worker_name=name, role=role)
    yield here, there, names
    with session_scope(db_settings) as session:
        session.execute(delete(WorkerRoleRow).where(WorkerRoleRow.worker_name.in_(names)))


def test_a_worker_name_has_its_host_after_the_at() -> None:
    assert host_of("large-12@gpu-node-3") == "gpu-node-3"
    assert host_of("decode-e2e@a@b") == "b"
    assert host_of("bare") == ""  # no host named: never counted as another host's


def test_only_workers_of_other_hosts_that_answer_count(
    db_settings: Settings, hosts: tuple[str, str, list[str]]
) -> None:
    here, _, names = hosts
    asked: list[list[str]] = []

    def ping(candidates: list[str]) -> set[str]:
        asked.append(candidates)
        return {names[0], names[2]}  # this host's worker is never asked; an answer from it is ignored

    assert workers_elsewhere(db_settings, host=here, ping=ping) == [names[0]]
    assert names[2] not in asked[0] and {names[0], names[1]} <= set(asked[0])
    assert workers_elsewhere(db_settings, host=here, ping=lambda _: set()) == []  # recorded, but gone


def test_a_local_store_is_refused_while_another_host_runs_a_worker(
    db_settings: Settings, hosts: tuple[str, str, list[str]]
) -> None:
    here, there, names = hosts
    with pytest.raises(SettingsError) as refused:
        refuse_local_blobs_across_hosts(_local(db_settings), host=here, ping=lambda _: {names[1]})
    message = str(refused.value)
    assert "REPRISE_BLOB_BACKEND=s3" in message and "REPRISE_S3_BUCKET" in message
    assert there in message and names[1] in message and f"@{here}" in message


def test_s3_a_single_host_and_silent_rows_start(
    db_settings: Settings, hosts: tuple[str, str, list[str]]
) -> None:
    here, there, _ = hosts

    def never(_: list[str]) -> set[str]:
        raise AssertionError("an S3 store needs no ping")

    refuse_local_blobs_across_hosts(_s3(db_settings), host=here, ping=never)
    refuse_local_blobs_across_hosts(_local(db_settings), host=here, ping=lambda _: set())  # rows of the dead
    # On the other host itself, only this host's worker is elsewhere, and it does not answer.
    refuse_local_blobs_across_hosts(_local(db_settings), host=there, ping=lambda _: set())
    assert local_blobs_refusal(_local(db_settings), host=here, elsewhere=[]) is None


def test_an_unreachable_database_does_not_stop_a_worker(db_settings: Settings) -> None:
    nowhere = _local(db_settings).model_copy(
        update={"database_url": "postgresql+psycopg://x@127.0.0.1:1/none"}
    )
    refuse_local_blobs_across_hosts(nowhere, host="here", ping=lambda _: {"large-1@there"})


def test_the_broker_ping_hears_nobody_on_an_empty_broker(db_settings: Settings, redis_url: str) -> None:
    app = make_celery_app(db_settings.model_copy(update={"redis_url": redis_url}))
    try:
        assert broker_ping(app, timeout_s=0.5)([f"nobody-{uuid.uuid4().hex[:6]}@nowhere"]) == set()
    finally:
        app.close()


def test_the_monitor_warns_when_live_workers_span_hosts_under_a_local_store(db_settings: Settings) -> None:
    live = ["large-1@a", "small-2@b", "decode-3@a"]
    warning = spanned_hosts_warning(_local(db_settings), live)
    assert warning is not None and "2 hosts (a, b)" in warning and "REPRISE_BLOB_BACKEND=s3" in warning
    assert spanned_hosts_warning(_s3(db_settings), live) is None
    assert spanned_hosts_warning(_local(db_settings), ["large-1@a", "small-2@a"]) is None
    assert spanned_hosts_warning(_local(db_settings), ["large-1", "small-1@a"]) is None  # a fake's names
