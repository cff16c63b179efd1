"""Run Alembic migrations programmatically (`reprise migrate`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.exc import DBAPIError

import migrations
from core.errors import EmbeddingDimensionMismatch
from core.server_keys import webhook_secret_keys
from core.settings import Settings
from db.engine import engine_for


def alembic_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", settings.sqlalchemy_url.replace("%", "%%"))
    config.attributes["text_embedding_dim"] = settings.text_embedding_dim
    config.attributes["image_embedding_dim"] = settings.image_embedding_dim
    config.attributes["webhook_secret_keys"] = webhook_secret_keys(settings)  # to encrypt webhook secrets
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)
    check_embedding_dims(settings)


def downgrade(settings: Settings, revision: str = "base") -> None:
    command.downgrade(alembic_config(settings), revision)


@dataclass(frozen=True)
class SchemaState:
    """Where the database's schema stands against the code's migrations."""

    current: frozenset[str]  # the database's Alembic revisions (empty: never migrated)
    heads: frozenset[str]  # the migrations' heads, from the code
    error: str | None = None  # why the database could not be read, if it could not

    @property
    def at_head(self) -> bool:
        return self.error is None and bool(self.heads) and self.current == self.heads

    def line(self) -> str:
        found = self.error or (", ".join(sorted(self.current)) or "no schema")
        return f"database at {found}; the code's head is {', '.join(sorted(self.heads))}"


def schema_state(settings: Settings) -> SchemaState:
    """The database's revision and the code's head, read without changing anything."""
    heads = frozenset(ScriptDirectory.from_config(alembic_config(settings)).get_heads())
    engine = engine_for(settings.sqlalchemy_url)
    try:
        with engine.connect() as conn:
            current = frozenset(MigrationContext.configure(conn).get_current_heads())
    except DBAPIError as error:  # unreachable, or refused: not at head yet, and say why
        return SchemaState(frozenset(), heads, error=(str(error.orig).strip().splitlines() or ["?"])[0])
    finally:
        engine.dispose()
    return SchemaState(current, heads)


def wait_for_head(
    settings: Settings,
    wait_s: float,
    *,
    poll_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> SchemaState:
    """Read the schema's state until the database is at the code's head or wait_s has passed (0: once):
    what a process that must not start on an older schema waits on while `reprise migrate` runs."""
    deadline = clock() + wait_s
    state = schema_state(settings)
    while not state.at_head and clock() < deadline:
        sleep(max(0.0, min(poll_s, deadline - clock())))
        state = schema_state(settings)
    return state


def check_embedding_dims(settings: Settings) -> None:
    """Refuse to run against columns built for another embedder: lookups would fail later."""
    engine = engine_for(settings.sqlalchemy_url)
    if "cache_entries" not in inspect(engine).get_table_names():
        return
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT attname, atttypmod FROM pg_attribute WHERE attrelid = 'cache_entries'::regclass "
                "AND attname IN ('text_embedding', 'image_embedding')"
            )
        ).all()
    found = {name: int(typmod) for name, typmod in rows}
    expected = {
        "text_embedding": settings.text_embedding_dim,
        "image_embedding": settings.image_embedding_dim,
    }
    for column, dim in expected.items():
        if found.get(column) not in (None, -1, dim):
            variable = "REPRISE_" + column.upper() + "_DIM"
            raise EmbeddingDimensionMismatch(
                f"cache_entries.{column} holds {found[column]}-dimensional vectors but {variable}={dim}. "
                f"Fix: set {variable}={found[column]} to match the database, or migrate a fresh database "
                "(`reprise migrate --downgrade base` drops the cache)."
            )
