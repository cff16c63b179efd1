"""Engine and sessions. One engine per process and URL (and one without a pool, for a process that forks)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from core.settings import Settings, get_settings


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


def get_engine(settings: Settings | None = None) -> Engine:
    return engine_for((settings or get_settings()).sqlalchemy_url)


@lru_cache(maxsize=8)
def _unpooled_engine_for(url: str) -> Engine:
    """Opens a connection per session and closes it after: a process that forks (a worker's main
    process) keeps no socket open that a child would inherit, and share."""
    return create_engine(url, poolclass=NullPool)


@lru_cache(maxsize=16)
def _sessionmaker(url: str, pooled: bool) -> sessionmaker[Session]:
    engine = engine_for(url) if pooled else _unpooled_engine_for(url)
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(settings: Settings | None = None, *, pooled: bool = True) -> Iterator[Session]:
    """A session that commits on success and rolls back on error.

    pooled=False: its connection is closed at the end rather than kept in the pool (see
    _unpooled_engine_for)."""
    session = _sessionmaker((settings or get_settings()).sqlalchemy_url, pooled)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def ping(session: Session) -> None:
    """One round trip to the database; raises SQLAlchemyError when it does not answer."""
    session.execute(text("SELECT 1"))
