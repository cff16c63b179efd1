"""What /metrics serves, on the API's port (api/routes/health.py) or its own (api/metrics_server.py).

Two sources, one exposition through prometheus_client:
- the instruments the API processes update as they serve (api.metrics' counters and histograms), this
  process's registry, or every API process's summed by prometheus_client's multiprocess mode;
- what Postgres and Redis hold at scrape time (pools, cascade, read path, queues, cache, quality guard):
  `StoreCollector`, a custom collector, prometheus_client's way of exporting another system's values.
  The scraping process builds them afresh, so a count that only grows is a counter (prometheus_client's
  Counter can only be incremented), and a decode node gone from Redis leaves the exposition with it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta

import redis
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.metrics import cascade_families, pool_families
from api.quality_guard import guard_families, guard_view, thresholds_in_use
from api.read_metrics import read_families, read_nodes_view
from api.store_metrics import jobs_in_flight, queue_depths, recent_footprint, store_families
from core.settings import Settings
from db.cascade import cascade_counts
from db.cascade import latest_decision as latest_cascade_decision
from db.pools import latest_decision, workers_per_role

log = logging.getLogger(__name__)

Sessions = Callable[[], AbstractContextManager[Session]]


class StoreCollector(Collector):
    """The metric families read from Postgres and Redis, each time it is collected. A source whose store
    does not answer is left out of that scrape (and logged); the others and the instruments still are."""

    def __init__(self, settings: Settings, broker: redis.Redis, sessions: Sessions) -> None:
        self.settings = settings
        self.broker = broker
        self.sessions = sessions

    def collect(self) -> list[Metric]:
        families: list[Metric] = []
        try:
            with self.sessions() as session:
                for source, read in self._sources(session):
                    try:
                        families.extend(read())
                    except (SQLAlchemyError, redis.RedisError):
                        log.warning("metrics: %s not read, a store is unreachable", source, exc_info=True)
                        session.rollback()  # a failed statement ends the transaction the next source uses
        except (SQLAlchemyError, redis.RedisError):  # the session's own commit or close
            log.warning("metrics: the stores' metrics not read", exc_info=True)
        return families

    def describe(self) -> list[Metric]:
        return described_families()

    def _sources(self, session: Session) -> Iterator[tuple[str, Callable[[], list[Metric]]]]:
        settings, broker = self.settings, self.broker
        yield "pools", lambda: pool_families(workers_per_role(session), latest_decision(session))
        yield (
            "cascade",
            lambda: cascade_families(
                cascade_counts(session, datetime.now(UTC) - timedelta(hours=1)),
                latest_cascade_decision(session),
            ),
        )
        yield (
            "read path",
            lambda: read_families(read_nodes_view(broker, session, heartbeat_s=settings.read_heartbeat_s)),
        )
        yield (
            "queues and cache",
            lambda: store_families(queue_depths(broker), jobs_in_flight(session), recent_footprint(session)),
        )
        yield (
            "quality guard",
            lambda: guard_families(guard_view(session, settings), thresholds_in_use(session, settings)),
        )


def described_families() -> list[Metric]:
    """Every family StoreCollector exports, without the stores' values (what a registry checks names by)."""
    return [
        *pool_families({}, None),
        *cascade_families(None, None),
        *read_families({}),
        *store_families({}, {}, []),
        *guard_families(None, {}),
    ]


class Exposition(Collector):
    """The API's instruments (every process's in multiprocess mode) and the stores' families, in one
    collector for prometheus_client's generate_latest and HTTP server."""

    def __init__(self, stores: StoreCollector) -> None:
        self.stores = stores
        self.instruments = instruments()

    def collect(self) -> Iterable[Metric]:
        yield from self.instruments.collect()
        yield from self.stores.collect()


def instruments() -> CollectorRegistry:
    """Every API process's instruments in multiprocess mode (PROMETHEUS_MULTIPROC_DIR); this process's
    registry otherwise, with prometheus_client's process and platform collectors."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return REGISTRY
