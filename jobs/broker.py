"""The broker's Redis: a client of it, and Celery's transport options, from the configured URL.

REPRISE_REDIS_URL is a plain Redis URL (redis://, rediss://, unix://) or a Sentinel one in kombu's form,
sentinel://[user:password@]host:port[/db];sentinel://host2:port..., whose master the sentinels know as
REPRISE_REDIS_SENTINEL_MASTER. Celery reaches the master through kombu's Sentinel transport; every client
the project opens on the broker itself (answers, heartbeats, queue depths, the beat lock) comes from here,
so that both forms work everywhere. As in kombu, the first URL's credentials and database are the
master's; the sentinels are asked without a password.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
from redis.sentinel import Sentinel

from core.settings.services import SENTINEL_SCHEME

if TYPE_CHECKING:
    from core.settings import Settings

SENTINEL_PORT = 26379  # Redis Sentinel's default port, kombu's too
SENTINEL_TIMEOUT_S = 2.0  # one sentinel's answer; the next sentinel is asked after it


def sentinel_nodes(url: str) -> list[tuple[str, int]]:
    """The (host, port) of every sentinel of a sentinel:// URL, in the order given."""
    nodes = [urlsplit(node) for node in url.split(";")]
    return [(node.hostname or "127.0.0.1", node.port or SENTINEL_PORT) for node in nodes]


def _master_options(url: str) -> dict[str, Any]:
    first = urlsplit(url.split(";", 1)[0])
    db = first.path.strip("/")
    return {"username": first.username or None, "password": first.password, "db": int(db) if db else 0}


def _sentinel_options(options: dict[str, Any]) -> dict[str, Any]:
    # Each sentinel is asked once, within a timeout even where the caller set none: one that does not
    # answer is skipped for the next (redis-py would retry it 3 times with a growing backoff, seconds per
    # dead sentinel). As redis-py does by default, the socket options only, no credentials.
    once = {"retry": None, "socket_connect_timeout": SENTINEL_TIMEOUT_S, "socket_timeout": SENTINEL_TIMEOUT_S}
    return once | {key: value for key, value in options.items() if key.startswith("socket_")}


def redis_client(url: str, *, sentinel_master: str, **options: Any) -> redis.Redis:
    """A client of the Redis at url; of the master that sentinel_master names for a sentinel:// url.
    options are redis-py's connection options (socket_timeout...)."""
    if not url.startswith(SENTINEL_SCHEME):
        return redis.Redis.from_url(url, **options)
    sentinels = Sentinel(sentinel_nodes(url), sentinel_kwargs=_sentinel_options(options))  # type: ignore[no-untyped-call]
    master: redis.Redis = sentinels.master_for(sentinel_master, **_master_options(url), **options)  # type: ignore[no-untyped-call]
    return master


def broker_client(settings: Settings, **options: Any) -> redis.Redis:
    """A client of the broker's Redis (its master under Sentinel)."""
    return redis_client(settings.broker_url, sentinel_master=settings.redis_sentinel_master, **options)


class _BlockingSentinelPool(aiosentinel.SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """The master's connections under Sentinel, waiting for a free one as BlockingConnectionPool does."""


def async_broker_client(
    settings: Settings, *, max_connections: int | None = None, wait_s: float | None = None, **options: Any
) -> aioredis.Redis:
    """An asyncio client of the broker's Redis. With max_connections, at most that many connections, a
    command waiting up to wait_s for a free one (redis-py's BlockingConnectionPool)."""
    url = settings.broker_url
    blocking: dict[str, Any] = {}
    if max_connections is not None:
        blocking = {"max_connections": max_connections, "timeout": wait_s}
    if not url.startswith(SENTINEL_SCHEME):
        if max_connections is None:
            return aioredis.Redis.from_url(url, **options)
        return aioredis.Redis(
            connection_pool=aioredis.BlockingConnectionPool.from_url(url, **blocking, **options)
        )
    sentinels = aiosentinel.Sentinel(sentinel_nodes(url), sentinel_kwargs=_sentinel_options(options))  # type: ignore[no-untyped-call]
    pool_class = aiosentinel.SentinelConnectionPool if max_connections is None else _BlockingSentinelPool
    master: aioredis.Redis = sentinels.master_for(
        settings.redis_sentinel_master,
        connection_pool_class=pool_class,
        **_master_options(url),
        **blocking,
        **options,
    )
    return master


def transport_options(settings: Settings) -> dict[str, Any]:
    """What kombu's Redis transport needs beyond the URL under Sentinel: the master's name, and how to
    ask the sentinels (as this module's own clients do)."""
    if not settings.broker_sentinel:
        return {}
    return {"master_name": settings.redis_sentinel_master, "sentinel_kwargs": _sentinel_options({})}
