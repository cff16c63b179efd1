"""`reprise services up|down|status` with embedded servers in a scratch data directory."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from core.errors import ServiceError
from core.settings import Settings, load_settings
from reprise.services import manager

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture()
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    for name in ("REPRISE_DATABASE_URL", "REPRISE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(data_dir=tmp_path / "data", pg_port=_free_port(), redis_port=_free_port())
    yield settings
    manager.down(settings)


def test_up_is_idempotent_and_down_stops_only_what_it_started(scratch: Settings) -> None:
    first = manager.up(scratch)
    assert [s.running for s in first] == [True, True]
    second = manager.up(scratch)
    assert [s.detail for s in second] == [s.detail for s in first]  # same pids: servers reused

    with psycopg.connect(scratch.sqlalchemy_url.replace("+psycopg", "")) as conn:
        assert conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone() == (
            "vector",
        )
    assert redis.Redis.from_url(scratch.broker_url).ping()

    assert manager.down(scratch) == ["postgres", "redis"]
    assert [s.running for s in manager.status(scratch)] == [False, False]
    assert manager.down(scratch) == []  # nothing left to stop


def test_a_data_directory_deeper_than_a_unix_socket_path_allows_still_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Postgres caps a Unix socket's path at 107 bytes; the stack connects over TCP and opens none."""
    for name in ("REPRISE_DATABASE_URL", "REPRISE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    deep = tmp_path / ("a-directory-name-as-long-as-pytest-makes-them" * 2) / "stack" / "local" / "data"
    assert len(str(deep / "postgres" / "data" / ".s.PGSQL.54329")) > 107
    settings = load_settings(data_dir=deep, pg_port=_free_port(), redis_port=_free_port())
    try:
        assert all(s.running for s in manager.up(settings))
        with psycopg.connect(settings.sqlalchemy_url.replace("+psycopg", "")) as conn:
            assert conn.execute("SHOW unix_socket_directories").fetchone() == ("",)
    finally:
        manager.down(settings)


def test_stale_pid_files_are_replaced(scratch: Settings) -> None:
    manager.up(scratch)
    manager.down(scratch)
    redis_dir = scratch.data_dir / "redis"
    (redis_dir / "redis.pid").write_text("999999\n")
    statuses = manager.up(scratch)
    assert all(s.running for s in statuses)


def test_a_taken_port_is_reported_with_the_fix(scratch: Settings) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", scratch.redis_port))
        blocker.listen()
        with pytest.raises(ServiceError, match="REPRISE_REDIS_PORT"):
            manager.up(scratch)


def test_unreachable_external_database_says_what_is_missing(tmp_path: Path) -> None:
    settings = load_settings(
        data_dir=tmp_path,
        database_url=f"postgresql://nobody@127.0.0.1:{_free_port()}/x",
        redis_port=_free_port(),
    )
    with pytest.raises(ServiceError, match="REPRISE_DATABASE_URL is set but the server is not reachable"):
        manager.up(settings)


def test_external_database_without_pgvector_is_refused(tmp_path: Path) -> None:
    # The machine's Debian Postgres 15 has no pgvector: exactly the case the message must explain.
    try:
        psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=2).close()
    except psycopg.OperationalError:
        pytest.fail("this test needs the system Postgres on 127.0.0.1:5432 (see README, Tests)")
    settings = load_settings(data_dir=tmp_path, database_url="postgresql://postgres@127.0.0.1:5432/postgres")
    with pytest.raises(ServiceError, match="without the pgvector extension"):
        manager.up(settings)
