"""Probing webhook endpoints that failed: each endpoint with deliveries waiting after a failure is tried
every REPRISE_WEBHOOK_PROBE_S with its earliest waiting event (jobs.policies.webhook_recovery), so that
one that came back while no new event was sent to it is found; the probe's success then sends every
waiting delivery at once (workers.webhook_delivery.follow_endpoint). A failed probe is not recorded."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import redis

from core.settings import Settings
from core.vocabulary import WebhookEvent
from db import webhooks as webhooks_db
from db.engine import session_scope
from jobs.dispatch import Dispatcher
from jobs.policies.webhook_recovery import FAILING_PREFIX, PROBING, probe_of, url_prefix

log = logging.getLogger(__name__)


def probe_endpoints(settings: Settings, dispatcher: Dispatcher, broker: redis.Redis, *, now: float) -> int:
    """Queue one probe per failing endpoint not tried for webhook_probe_s; return how many. An endpoint
    with nothing waiting any more (delivered, or its schedules spent) leaves the set."""
    sent = 0
    for raw in broker.zrangebyscore(PROBING, "-inf", now - settings.webhook_probe_s):
        endpoint = raw.decode() if isinstance(raw, bytes) else str(raw)
        url = broker.get(FAILING_PREFIX + endpoint)
        if url is None:  # the mark expired or a success took it: nothing to probe
            broker.zrem(PROBING, endpoint)
            continue
        url_text = url.decode() if isinstance(url, bytes) else str(url)
        at = datetime.now(UTC)
        with session_scope(settings) as session:
            waiting = webhooks_db.waiting_at(session, url_prefix=url_prefix(url_text), after=at)
        if not waiting:
            broker.zrem(PROBING, endpoint)
            broker.delete(FAILING_PREFIX + endpoint)
            continue
        broker.zadd(PROBING, {endpoint: now}, xx=True)  # tried now: the next probe a period later
        chosen = probe_of(waiting, endpoint=endpoint, now=at)
        if chosen is not None:
            dispatcher.deliver_webhook(
                chosen.job_id, WebhookEvent(chosen.event), attempt=chosen.attempt + 1, probe=True
            )
            sent += 1
    if sent:
        log.info("probing %d webhook endpoints that failed", sent)
    return sent
