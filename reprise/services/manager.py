"""`reprise services up|down|status`: use configured servers, or start embedded ones."""

from __future__ import annotations

from core.settings import Settings
from core.settings.services import default_shared_buffers_mb
from reprise.services.common import ServiceStatus
from reprise.services.postgres import EmbeddedPostgres, check_external_postgres
from reprise.services.redis import EmbeddedRedis, check_external_redis


def embedded_postgres(settings: Settings) -> EmbeddedPostgres:
    return EmbeddedPostgres(
        root=settings.data_dir.resolve() / "postgres",
        port=settings.pg_port,
        shared_buffers_mb=settings.pg_shared_buffers_mb or default_shared_buffers_mb(),
    )


def embedded_redis(settings: Settings) -> EmbeddedRedis:
    return EmbeddedRedis(root=settings.data_dir.resolve() / "redis", port=settings.redis_port)


def up(settings: Settings) -> list[ServiceStatus]:
    """Idempotent: reuses running servers; raises ServiceError with the fix when one cannot be used."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return [
        embedded_postgres(settings).up()
        if settings.embedded_database
        else check_external_postgres(settings.sqlalchemy_url),
        embedded_redis(settings).up() if settings.embedded_redis else check_external_redis(settings),
    ]


def down(settings: Settings) -> list[str]:
    """Stop only what the project started (embedded servers under data_dir)."""
    stopped = []
    if settings.embedded_database and embedded_postgres(settings).down():
        stopped.append("postgres")
    if settings.embedded_redis and embedded_redis(settings).down():
        stopped.append("redis")
    return stopped


def status(settings: Settings) -> list[ServiceStatus]:
    statuses = []
    if settings.embedded_database:
        statuses.append(embedded_postgres(settings).status())
    else:
        statuses.append(
            ServiceStatus(
                "postgres", embedded=False, running=True, url=settings.sqlalchemy_url, detail="external"
            )
        )
    if settings.embedded_redis:
        statuses.append(embedded_redis(settings).status())
    else:
        statuses.append(
            ServiceStatus("redis", embedded=False, running=True, url=settings.broker_url, detail="external")
        )
    return statuses
