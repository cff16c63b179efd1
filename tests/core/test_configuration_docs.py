"""docs/configuration.md is generated from the settings classes: every setting once, under its
subsystem, with its variable, type, default and description; a secret's default never shows; and the
committed file is what `reprise config docs` prints now."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from core.settings import ENV_PREFIX, Settings
from core.settings.reference import DOCS_COMMAND, GROUPS, default_of, describe, type_of

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_reference_is_current() -> None:
    assert DOCS.read_text() == describe(), (
        f"docs/configuration.md is stale: core/settings/ changed since. Regenerate it: {DOCS_COMMAND}"
    )


def test_every_setting_belongs_to_exactly_one_subsystem() -> None:
    owned = [name for group in GROUPS for name in group.__annotations__ if name in group.model_fields]
    assert sorted(owned) == sorted(Settings.model_fields)
    assert len(owned) == len(set(owned))


def test_every_variable_has_one_row_with_a_description() -> None:
    rows = [line for line in describe().splitlines() if line.startswith(f"| `{ENV_PREFIX}")]
    assert len(rows) == len(Settings.model_fields)
    for name, field in Settings.model_fields.items():
        assert sum(row.startswith(f"| `{ENV_PREFIX}{name.upper()}` |") for row in rows) == 1
        assert field.description, f"{name} has no description"


@pytest.mark.parametrize("group", GROUPS, ids=lambda group: group.__name__)
def test_each_subsystem_module_and_class_names_its_subsystem(group: type[BaseSettings]) -> None:
    module_doc = sys.modules[group.__module__].__doc__ or ""
    title = (group.__doc__ or "").splitlines()[0].partition(":")[0]
    assert title and f"## {title}\n" in describe()
    assert module_doc.startswith(title.split(" (")[0] + ":"), f"{group.__module__} does not open with {title}"


@pytest.mark.parametrize(
    ("variable", "type_text", "default"),
    [
        ("PG_PORT", "int (>= 1024, <= 65535)", "`54329`"),
        ("CAPTURE_STEPS", "comma list of int", "`5,10,15,20,25`"),
        ("WEBHOOK_RETRY_DELAYS_S", "comma list of float", "`0,5,300,1800,7200,18000,36000,36000`"),
        ("BLOB_BACKEND", "one of `local`, `s3`", "`local`"),
        ("MONITOR_PERIOD_S", "int (>= 60, a multiple of 60)", "`60`"),
        ("PREDICTOR_NU", "float (> 0, <= 1), optional", "unset"),
        ("PREDICTOR_ENABLED", "bool", "`false`"),
        ("DATA_DIR", "path", "`.reprise`"),
        ("FLOWER_BASIC_AUTH", "secret, optional", "unset"),
    ],
)
def test_a_row_gives_the_type_bounds_and_default_as_an_operator_writes_them(
    variable: str, type_text: str, default: str
) -> None:
    field = Settings.model_fields[variable.lower()]
    assert (type_of(field), default_of(field)) == (type_text, default)
    assert f"| `{ENV_PREFIX}{variable}` | {type_text} | {default} |" in describe()


def test_a_secret_default_is_never_shown() -> None:
    class WithSecret(BaseSettings):
        password: SecretStr = SecretStr("hunter2")
        token: SecretStr | None = SecretStr("s3cr3t")

    for name in ("password", "token"):
        shown = default_of(WithSecret.model_fields[name])
        assert shown == "(secret, not shown)"


def test_markdown_in_descriptions_is_kept_readable() -> None:
    text = describe()
    assert "`reprise bench admission --threads 1\\|4\\|8`" in text  # a pipe does not split the cell
    assert "Unset: &lt;data_dir>/blobs." in text  # not an HTML tag
