"""The `reprise` command reports an unmigrated database as a message with the fix, not a traceback."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import ProgrammingError

from reprise import cli


def _undefined_table() -> ProgrammingError:
    orig = psycopg.errors.UndefinedTable('relation "tenants" does not exist\nLINE 2: FROM tenants')
    return ProgrammingError("SELECT ... FROM tenants", {}, orig)


def test_a_missing_table_names_the_migration_as_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unmigrated() -> None:
        raise _undefined_table()

    monkeypatch.setattr(cli, "app", unmigrated)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert 'relation "tenants" does not exist' in err and "reprise migrate" in err and "LINE 2" not in err


def test_other_database_errors_are_not_disguised() -> None:
    syntax = ProgrammingError("SELEC 1", {}, psycopg.errors.SyntaxError("syntax error at or near SELEC"))
    assert cli.schema_missing(syntax) is None
    assert cli.schema_missing(ValueError("no orig")) is None
    assert cli.schema_missing(_undefined_table()) is not None
