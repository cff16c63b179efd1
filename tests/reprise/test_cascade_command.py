"""`reprise cascade train` and the cascade options of `bench simulate` refuse what they cannot do with
the fix in one line (exit status 2), before loading any model."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from reprise.cli import app as cli

pytestmark = pytest.mark.usefixtures("fresh_settings")


def test_training_for_a_real_light_model_asks_for_real_images() -> None:
    result = CliRunner().invoke(
        cli, ["cascade", "train", "--no-save"], env={"REPRISE_SMALL_MODEL": "stabilityai/sd-turbo"}
    )
    assert result.exit_code == 2
    assert "--pairs FILE.jsonl" in result.output and "stabilityai/sd-turbo" in result.output


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--allocator", "bogus", "choose modm or diffserve"),
        ("--cascade-pair", "nope", "choose sd15, sdxl"),
        ("--cascade-profile", "/nonexistent/cascade.json", "reprise cascade train --json"),
    ],
)
def test_simulate_names_the_bad_cascade_option(option: str, value: str, says: str) -> None:
    result = CliRunner().invoke(
        cli, ["bench", "simulate", "--profile", "diffserve", option, value, "--limit", "5"]
    )
    assert result.exit_code == 2, result.output
    assert says in result.output
