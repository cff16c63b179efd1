"""Session fixtures: the real services (embedded or configured), a fresh migrated database per run."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from core.settings import Settings, load_settings
from core.vocabulary import LookupMode
from db.engine import engine_for
from reprise import migrate
from reprise.services import manager

pytest_plugins = ["tests.support.fixtures", "tests.support.s3"]  # API, tenant and S3 fixtures

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The step cache's default (auto) reuses work inside a run, so a run is not the full model's bit for bit;
# the suite's exactness tests (resume at k, batching, NIRVANA's and MoDM's figures) are written against
# the full model, so the suite runs it off, in this process and the stacks it starts. The step cache's
# own tests and the default's (tests/workers/runtime/test_step_cache.py) set it themselves.
os.environ["REPRISE_STEP_CACHE"] = "off"
# Likewise the quality guard (on by default) audits a random tenth of hits: one more task on a tenth of
# the suite's hits would make the tests that count a run's tasks and events flaky. Its own tests set it.
os.environ["REPRISE_QUALITY_GUARD"] = "false"


@pytest.fixture(scope="session", autouse=True)
def webhook_secret_keys_of_the_stacks() -> Iterator[None]:
    """This process seals tenants' webhook secrets under the key of the data directory the stacks it
    starts read theirs from (core.server_keys), whatever settings a test leaves cached meanwhile."""
    from core.server_keys import webhook_secret_keys
    from db.secret_box import use_keys

    use_keys(webhook_secret_keys(load_settings()))
    yield
    use_keys(None)


def _admin_dsn(settings: Settings, dbname: str) -> str:
    url = settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
    base, _, _ = url.rpartition("/")
    return f"{base}/{dbname}"


@pytest.fixture(scope="session")
def service_settings() -> Settings:
    """Settings of this machine's stack, with Postgres and Redis up (started when embedded). Lookups are
    NIRVANA's text lookups, which the mechanics tests are written against and which the tiny models
    serve too; the lab's default image lookups (core.settings.loading) are tested where they are named."""
    settings = load_settings(lookup_mode=LookupMode.TEXT_TO_TEXT)
    manager.up(settings)
    return settings


@contextmanager
def fresh_database(service_settings: Settings) -> Iterator[Settings]:
    """Settings pointing at a new database, migrated to head, dropped on exit."""
    name = f"reprise_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(_admin_dsn(service_settings, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _admin_dsn(service_settings, name).replace("postgresql://", "postgresql+psycopg://", 1)
    settings = service_settings.model_copy(update={"database_url": url})
    try:
        migrate.upgrade(settings)
        yield settings
    finally:
        engine_for(url).dispose()
        with psycopg.connect(_admin_dsn(service_settings, "postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def db_settings(service_settings: Settings) -> Iterator[Settings]:
    """Settings pointing at a fresh database, migrated to head, dropped after the session."""
    with fresh_database(service_settings) as settings:
        yield settings


@pytest.fixture(scope="session")
def redis_url(service_settings: Settings) -> str:
    """A Redis database number of its own for this test run, so queues never mix with a dev stack."""
    base = service_settings.broker_url.rsplit("/", 1)[0]
    return f"{base}/{1 + os.getpid() % 15}"


@pytest.fixture(scope="session")
def stack_redis_url(redis_url: str) -> str:
    """Another database for the end-to-end stack (a session fixture whose workers consume every queue
    of their database), so that tests reading queues with LLEN after it started still see their own."""
    base, _, number = redis_url.rpartition("/")
    return f"{base}/{1 + (int(number) + 6) % 15}"
