"""A failed acknowledgement frees the consumer's prefetch slot (jobs.broker_transport), against a real
Redis through the project's Celery app: the worker goes on consuming, and the message whose ack was
lost comes back after the visibility timeout."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest
import redis

from core.settings import load_settings
from jobs.broker_transport import transport_for
from jobs.celery_app import make_celery_app
from tests.support.redis_servers import scratch_redis

pytestmark = pytest.mark.integration

VISIBILITY_S = 1
KOMBU: Any = kombu  # its entities are untyped


@pytest.fixture
def broker_url(tmp_path: Path) -> Iterator[str]:
    with scratch_redis(tmp_path / "redis") as server:
        yield f"redis://127.0.0.1:{server.port}/0"


def _ack_with_the_broker_unreachable(message: Any, monkeypatch: pytest.MonkeyPatch, errors: Any) -> None:
    """Ack while every Redis pipeline fails as a dropped connection does; Celery's own call (it logs)."""

    def unreachable(*_: Any, **__: Any) -> Any:
        raise redis.exceptions.ConnectionError("Connection closed by server.")

    with monkeypatch.context() as patch:
        patch.setattr(redis.client.Pipeline, "execute", unreachable)
        message.ack_log_error(logging.getLogger(__name__), errors)


def _deliveries(broker_url: str, monkeypatch: pytest.MonkeyPatch, transport: str | None) -> list[int]:
    """Publish 0 and 1, consume with a prefetch of one, lose 0's ack; what is delivered after, in order."""
    app = make_celery_app(load_settings(redis_url=broker_url))
    options = app.conf.broker_transport_options
    app.conf.broker_transport_options = options | {"visibility_timeout": VISIBILITY_S}
    if transport != "project":
        app.conf.broker_transport = transport
    queue = KOMBU.Queue("lossy", KOMBU.Exchange("lossy"), routing_key="lossy")
    got: list[Any] = []
    with app.connection_for_read() as connection:
        channel = connection.channel()
        producer = KOMBU.Producer(channel)
        for number in (0, 1):
            producer.publish({"n": number}, exchange=queue.exchange, routing_key="lossy", declare=[queue])
        consumer = KOMBU.Consumer(
            channel, queues=[queue], callbacks=[lambda _, m: got.append(m)], accept=["json"]
        )
        consumer.qos(prefetch_count=1)
        consumer.consume()
        connection.drain_events(timeout=2)
        assert [m.payload["n"] for m in got] == [0]
        _ack_with_the_broker_unreachable(got[0], monkeypatch, connection.connection_errors)
        delivered: list[int] = []
        deadline = time.monotonic() + VISIBILITY_S + 4
        while time.monotonic() < deadline and len(delivered) < 2:
            channel.qos.restore_visible()  # what each consumer's poll does: unacked past the timeout
            try:
                connection.drain_events(timeout=0.5)
            except TimeoutError:
                continue
            delivered.append(got[-1].payload["n"])
            got[-1].ack()
        return delivered


def test_the_project_transport_is_named_for_redis_and_sentinel_urls() -> None:
    assert transport_for("redis://h:6379/0") == "jobs.broker_transport:Transport"
    assert transport_for("sentinel://h:26379;sentinel://g:26379") == "jobs.broker_transport:SentinelTransport"
    assert transport_for("memory://") is None
    assert make_celery_app(load_settings(redis_url="redis://h:6379/3")).conf.broker_transport == (
        "jobs.broker_transport:Transport"
    )


def test_a_lost_ack_leaves_the_worker_consuming_and_the_message_comes_back(
    broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _deliveries(broker_url, monkeypatch, "project") == [1, 0]


def test_kombus_own_transport_stops_consuming_after_a_lost_ack(
    broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the project's transport exists: the stock one holds the slot, and nothing is delivered again."""
    assert _deliveries(broker_url, monkeypatch, None) == []
