"""`reprise migrate --check [--wait S]`: what an init container waits on before a Deployment's process
starts. It reads the database's revision and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from core.settings import Settings
from reprise import migrate
from reprise.commands import services
from tests.reprise.test_migrate import scratch_settings  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration


class Clock:
    """A clock that sleeps by moving itself: wait_for_head's deadline without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_fresh_database_is_not_at_head_until_migrated(scratch_settings: Settings) -> None:  # noqa: F811
    before = migrate.schema_state(scratch_settings)
    assert not before.at_head and before.current == frozenset() and before.heads
    assert "no schema" in before.line()
    migrate.upgrade(scratch_settings)
    after = migrate.schema_state(scratch_settings)
    assert after.at_head and after.current == after.heads == before.heads
    migrate.downgrade(scratch_settings, "-1")
    behind = migrate.schema_state(scratch_settings)
    assert not behind.at_head and behind.current and behind.current != behind.heads


def test_waiting_polls_until_the_deadline_then_gives_up(scratch_settings: Settings) -> None:  # noqa: F811
    clock = Clock()
    state = migrate.wait_for_head(scratch_settings, 12.0, poll_s=5.0, clock=clock, sleep=clock.sleep)
    assert not state.at_head and clock.sleeps == [5.0, 5.0, 2.0]


def test_waiting_ends_when_the_migration_lands(scratch_settings: Settings) -> None:  # noqa: F811
    clock = Clock()

    def migrate_meanwhile(seconds: float) -> None:  # the migrate Job finishes during the first wait
        clock.sleep(seconds)
        migrate.upgrade(scratch_settings)

    state = migrate.wait_for_head(scratch_settings, 600.0, poll_s=5.0, clock=clock, sleep=migrate_meanwhile)
    assert state.at_head and clock.sleeps == [5.0]


def test_an_unreachable_database_is_not_at_head_and_says_why(scratch_settings: Settings) -> None:  # noqa: F811
    url = "postgresql+psycopg://reprise@127.0.0.1:9/reprise?connect_timeout=2"
    state = migrate.schema_state(scratch_settings.model_copy(update={"database_url": url}))
    assert not state.at_head and state.error and state.error in state.line()


@pytest.fixture()
def cli_settings(scratch_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:  # noqa: F811
    monkeypatch.setattr(services, "get_settings", lambda: scratch_settings)
    yield scratch_settings


def test_the_check_command_exits_by_the_schemas_state(cli_settings: Settings) -> None:
    import typer

    app = typer.Typer()
    app.command()(services.migrate_command)
    refused = CliRunner().invoke(app, ["--check"])
    assert refused.exit_code == 1 and "not migrated" in refused.output
    assert migrate.schema_state(cli_settings).current == frozenset()  # --check changed nothing
    migrate.upgrade(cli_settings)
    passed = CliRunner().invoke(app, ["--check", "--wait", "1"])
    assert passed.exit_code == 0 and passed.output.startswith("ok: database at ")
