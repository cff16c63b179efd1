"""`reprise config docs` prints the settings reference that docs/configuration.md holds."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from core.settings.reference import describe
from reprise.cli import app as cli

pytestmark = pytest.mark.usefixtures("fresh_settings")


def test_config_docs_prints_the_reference_and_nothing_else() -> None:
    result = CliRunner().invoke(cli, ["config", "docs"], env={"REPRISE_FLOWER_BASIC_AUTH": "admin:hunter2"})
    assert result.exit_code == 0, result.output
    assert result.stdout == describe()
    assert "hunter2" not in result.stdout  # the environment's values never reach the reference
