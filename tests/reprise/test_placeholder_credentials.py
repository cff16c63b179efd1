"""Every `reprise` command refuses to start while a credential setting still holds the placeholder the
deployment examples ship (CHANGE_ME of .env.example and the Kubernetes example Secrets): a message that
says "placeholder", names the variable and the fix, never the rest of the value, and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from core.settings import ENV_PREFIX, load_settings
from core.settings.credentials import CREDENTIAL_SETTINGS, PLACEHOLDER
from reprise.cli import app

# A value per credential setting with the placeholder where the secret goes, beside parts that are no
# placeholder and must not be printed either (a user or host name says where the secret would open).
PLACEHOLDERS = {
    "database_url": f"postgresql+psycopg://svc-db-user:{PLACEHOLDER}@db-host-1.internal:5432/reprise",
    "redis_url": f"redis://:{PLACEHOLDER}@redis-host-1.internal:6379/0",
    "s3_access_key_id": PLACEHOLDER,
    "s3_secret_access_key": PLACEHOLDER,
    "flower_basic_auth": f"flower-operator:{PLACEHOLDER}",
    "output_link_key": f"{PLACEHOLDER}-and-enough-characters-for-a-key",
    "webhook_secret_keys": f"{PLACEHOLDER}-and-enough-characters-for-a-key",
    "metrics_token": PLACEHOLDER,
}
NOT_SHOWN = ("svc-db-user", "db-host-1", "redis-host-1", "flower-operator")
REPRISE = Path(sys.executable).with_name("reprise")  # the console script, as the images run it


def variable(name: str) -> str:
    return ENV_PREFIX + name.upper()


def test_every_credential_setting_has_a_placeholder_case() -> None:
    assert set(PLACEHOLDERS) == set(CREDENTIAL_SETTINGS)


@pytest.mark.parametrize("name", sorted(CREDENTIAL_SETTINGS))
def test_settings_refuse_each_credential_at_the_placeholder(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.errors import SettingsError

    monkeypatch.setenv(variable(name), PLACEHOLDERS[name])
    with pytest.raises(SettingsError) as refused:
        load_settings()
    message = str(refused.value)
    assert "placeholder" in message and variable(name) in message
    assert not [part for part in NOT_SHOWN if part in message]
    monkeypatch.setenv(variable(name), PLACEHOLDERS[name].replace(PLACEHOLDER, "s3cr3t-Value_9"))
    load_settings()  # the same value with a real secret starts


def leaf_commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command of the `reprise` tree (typer's click groups), as the words that invoke it."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group: its own commands
            yield from leaf_commands(command, (*path, name))
        else:
            yield (*path, name)


@pytest.fixture
def placeholders(monkeypatch: pytest.MonkeyPatch, fresh_settings: None) -> None:
    for name, value in PLACEHOLDERS.items():
        monkeypatch.setenv(variable(name), value)


@pytest.mark.usefixtures("placeholders")
def test_every_command_refuses_a_placeholder_before_it_runs() -> None:
    """The settings check is the app's callback, which click runs before any subcommand parses its
    arguments or does its work: each command, in-process, exits 2 with the message."""
    commands = list(leaf_commands(typer.main.get_command(app)))
    assert {("migrate",), ("api",), ("worker",), ("beat",), ("flower",), ("keys", "create")} <= set(commands)
    runner = CliRunner()
    for words in commands:
        result = runner.invoke(app, list(words))
        assert result.exit_code == 2, (words, result.output)
        assert "placeholder" in result.output and "Traceback" not in result.output, words
        assert all(variable(name) in result.output for name in PLACEHOLDERS), words
        assert not [part for part in NOT_SHOWN if part in result.output], words


@pytest.mark.parametrize("command", [["migrate"], ["worker", "--role", "admit"], ["flower"]])
def test_the_installed_command_refuses_a_placeholder(command: list[str]) -> None:
    """The real `reprise` process, as a container starts it, with one credential at the placeholder."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(ENV_PREFIX)}
    environment[variable("s3_secret_access_key")] = PLACEHOLDER
    done = subprocess.run(
        [str(REPRISE), *command], env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{variable('s3_secret_access_key')} still holds the placeholder {PLACEHOLDER}" in done.stderr
    assert "Traceback" not in done.stderr
