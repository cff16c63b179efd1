"""Run Alembic migrations programmatically (`reprise migrate`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text

import migrations
from core.errors import EmbeddingDimensionMismatch
from core.settings import Settings
from db.engine import engine_for


def alembic_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", settings.sqlalchemy_url.replace("%", "%%"))
    config.attributes["text_embedding_dim"] = settings.text_embedding_dim
    config.attributes["image_embedding_dim"] = settings.image_embedding_dim
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)
    check_embedding_dims(settings)


def downgrade(settings: Settings, revision: str = "base") -> None:
    command.downgrade(alembic_config(settings), revision)


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
