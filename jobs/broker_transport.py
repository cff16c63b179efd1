"""kombu's Redis transports, with an acknowledgement that always frees its prefetch slot.

kombu's Redis QoS acknowledges a message in two parts: it removes the message from the broker's
unacked index (a Redis pipeline), then forgets it locally, which frees one of the consumer's prefetch
slots. When the Redis call fails (the connection drops mid-ack), the second part never runs: Celery
logs "Couldn't ack ..." and carries on, but the slot stays taken for the life of the channel. A
worker's prefetch is its concurrency (`worker_prefetch_multiplier=1`), so after that many failed acks
`can_consume()` is false for good and the worker takes no task again, while it stays connected and
its heartbeats look healthy (celery/celery#8030, #10205 describe the symptom). Seen in `reprise bench
chaos`'s lossy network: the admit worker stopped consuming, and every later job waited `starting`.

Here the local part runs whatever the broker answered. A message whose removal failed stays in the
unacked index, and kombu's visibility timeout brings it back to a consumer: it is delivered again,
which acks_late tasks already allow for (at least once; a job's lease and status make a second run
harmless). One delivery more, rather than a worker that never consumes again.

Celery takes the transport from `broker_transport` (jobs.celery_app), which names one of these for a
redis:// or a sentinel:// broker URL.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

SCHEMES = {"redis": "Transport", "sentinel": "SentinelTransport"}  # URL scheme -> the class here


class QoS(kombu_redis.QoS):
    """Redis QoS whose ack and reject free the prefetch slot even when the broker call fails."""

    def ack(self, delivery_tag: Any) -> None:
        try:
            self._remove_from_indices(delivery_tag).execute()  # type: ignore[no-untyped-call]
        finally:
            virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            if requeue:
                self.restore_by_tag(delivery_tag, leftmost=True)  # type: ignore[no-untyped-call]
            else:
                self._remove_from_indices(delivery_tag).execute()  # type: ignore[no-untyped-call]
        finally:
            virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(kombu_redis.SentinelChannel):
    QoS = QoS


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


def transport_for(url: str) -> str | None:
    """The transport Celery should use for a broker URL: one of these for redis:// and sentinel://,
    None (kombu's own, from the scheme) for any other."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    name = SCHEMES.get(scheme)
    return f"{__name__}:{name}" if name else None
