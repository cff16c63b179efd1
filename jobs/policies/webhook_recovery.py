"""Prompt redelivery: when a webhook endpoint answers 2xx again after failures, the deliveries waiting
for it are sent now rather than at their next slot of the retry schedule.

Standard Webhooks' schedule (0, 5 s, 5 min, 30 min...) spaces the attempts of one message to spare an
endpoint that is down; it knows nothing of the endpoint's other messages. Once one of them is answered
2xx the endpoint is up, and the others' next slot (up to hours away) is only delay: a receiver down for
8 s got its events after 300 s. An endpoint that stays down answers nothing 2xx, so its messages keep
the schedule unchanged.

Pure: the I/O (a mark in Redis per failing endpoint, the read of the waiting attempts from Postgres,
the enqueue) is in workers.webhook_delivery.

An endpoint that comes back while no new event is sent to it (every job ended during the outage)
would see no success to start from; so the reconciler probes each endpoint with waiting deliveries
every REPRISE_WEBHOOK_PROBE_S: the earliest waiting event sent early, recorded only if answered 2xx.
A failed probe is not an attempt: the messages of an endpoint that stays down keep their schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from db.webhooks import Waiting

FAILING_PREFIX = "reprise:webhooks:failing:"
# Endpoints with deliveries waiting after a failure, scored by when they were last tried (a sorted set):
# the reconciler probes those not tried for REPRISE_WEBHOOK_PROBE_S (jobs.passes.webhook_probes).
PROBING = "reprise:webhooks:probing"
# A waiting attempt due this soon is left to its own queued task: sending it too would race that task
# (two POSTs of one attempt). Two seconds is a Celery countdown's usual lateness on a busy worker.
DUE_SOON_S = 2.0
# At most this many waiting deliveries are sent per recovery; a later success of the endpoint (each of
# them is one) sends the next batch, so a backlog of thousands comes in waves the receiver can answer.
BATCH = 500


def endpoint_of(url: str) -> str:
    """The endpoint a URL reaches: scheme, host and port, lowercased, the default port written out.
    Deliveries to one endpoint share its health whatever their paths."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


def url_prefix(url: str) -> str:
    """scheme://netloc as the URL writes it: the start every URL of the endpoint written the same way
    shares (a cheap filter in SQL; `endpoint_of` then decides)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def probe_of(waiting: Sequence[Waiting], *, endpoint: str, now: datetime) -> Waiting | None:
    """The delivery to probe an endpoint with: its earliest waiting one not due soon."""
    chosen = to_send_now(waiting, endpoint=endpoint, now=now)
    return chosen[0] if chosen else None


def failing_key(url: str) -> str:
    """The Redis key marking that the endpoint of `url` failed an attempt that will be retried."""
    return FAILING_PREFIX + endpoint_of(url)


def mark_ttl_s(schedule: Sequence[float]) -> int:
    """How long a failure mark lives: the longest wait of the schedule, after which no attempt of the
    failure that set it is still waiting."""
    return max(1, int(max(schedule, default=0.0)) + 1)


def to_send_now(waiting: Sequence[Waiting], *, endpoint: str, now: datetime) -> list[Waiting]:
    """Of the waiting messages, those of `endpoint` to send now: not due within DUE_SOON_S (their own
    task sends them), the earliest due first, at most BATCH."""
    soon = now + timedelta(seconds=DUE_SOON_S)
    chosen = [w for w in waiting if endpoint_of(w.url) == endpoint and w.next_attempt_at > soon]
    return sorted(chosen, key=lambda w: w.next_attempt_at)[:BATCH]
