"""`reprise pools ...` and the monitor's settings: pins recorded for a worker that is not running,
status, unpin; MoDM's defaults and refused combinations."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import delete
from typer.testing import CliRunner

from core.errors import SettingsError
from core.settings import Settings, get_settings, load_settings
from core.vocabulary import MonitorMode
from db.engine import session_scope
from db.models import WorkerRoleRow
from reprise.commands.pools import pools_app


@pytest.fixture
def cli_settings(
    db_settings: Settings, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Settings]:
    """The CLI reads settings from the environment: point it at the test database and broker."""
    from jobs.celery_app import get_celery_app

    monkeypatch.setenv("REPRISE_DATABASE_URL", db_settings.sqlalchemy_url)
    monkeypatch.setenv("REPRISE_REDIS_URL", redis_url)
    get_settings.cache_clear()
    get_celery_app.cache_clear()
    yield get_settings()
    get_settings.cache_clear()
    get_celery_app.cache_clear()


@pytest.mark.integration
def test_pin_status_unpin_a_worker_that_is_not_running(cli_settings: Settings) -> None:
    worker = f"large-{uuid.uuid4().hex[:8]}@gpu-host"
    runner = CliRunner()
    try:
        pinned = runner.invoke(pools_app, ["pin", worker, "small"])
        assert pinned.exit_code == 0, pinned.output
        assert "it is not running: it starts as small" in pinned.output
        status = runner.invoke(pools_app, ["status"])
        assert status.exit_code == 0, status.output
        [line] = [line for line in status.output.splitlines() if line.startswith(worker)]
        assert line.split()[1:4] == ["small", "yes", "no"]  # role, pinned, alive
        assert runner.invoke(pools_app, ["unpin", worker]).exit_code == 0
        assert runner.invoke(pools_app, ["unpin", "nobody@nowhere"]).exit_code == 1
        refused = runner.invoke(pools_app, ["pin", worker, "decode"])
        assert refused.exit_code == 2 and "large or small" in refused.output
    finally:
        with session_scope(cli_settings) as session:
            session.execute(delete(WorkerRoleRow).where(WorkerRoleRow.worker_name == worker))


def test_monitor_defaults_follow_modm() -> None:
    settings = load_settings()
    assert (settings.monitor_kp, settings.monitor_ki, settings.monitor_kd) == (0.6, 0.05, 0.05)
    assert settings.monitor_mode is MonitorMode.THROUGHPUT  # MoDM Appendix Q.9: its default
    assert (settings.monitor_min_large, settings.monitor_period_s) == (1, 60)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"monitor_period_s": 90}, "REPRISE_MONITOR_PERIOD_S=90"),
        ({"monitor_min_large": 0}, "REPRISE_MONITOR_MIN_LARGE=0"),
        ({"monitor_min_small": 2, "monitor_max_small": 1}, "REPRISE_MONITOR_MAX_SMALL"),
    ],
)
def test_monitor_settings_refused_with_the_variable_to_fix(overrides: dict[str, int], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(**overrides)
