"""The circuit breaker of a webhook endpoint that does not answer: after
REPRISE_WEBHOOK_PAUSE_AFTER_TIMEOUTS attempts in a row that ended without an answer (the attempt's
deadline, or a connect or read timeout), the endpoint is paused. A paused endpoint is sent nothing but
the reconciler's probe (jobs.passes.webhook_probes, every REPRISE_WEBHOOK_PROBE_S): each of its other
attempts is recorded as failed, without a request, and its next one keeps the schedule. Any answer,
whatever its status, closes the breaker (the endpoint is up, however it answers), and a probe answered
2xx sends the waiting deliveries at once (workers.webhook_delivery.follow_endpoint).

Only the attempts that hold a thread for their whole deadline count: an endpoint that answers 503 at
once costs nothing to try and keeps its schedule. The count lives in Redis, shared by every consumer,
and expires with the retry schedule's longest wait; without Redis nothing is paused (best effort).
"""

from __future__ import annotations

import logging

import redis

from jobs.policies.webhook_recovery import endpoint_of

log = logging.getLogger(__name__)

TIMEOUTS_PREFIX = "reprise:webhooks:timeouts:"


def paused_error(url: str, probe_s: float) -> str:
    return (
        f"paused: {endpoint_of(url)} did not answer its recent attempts; nothing is sent to it but a probe "
        f"every {probe_s:g} s until it answers"
    )


class EndpointPause:
    def __init__(self, broker: redis.Redis, *, after: int, ttl_s: int) -> None:
        self._broker = broker
        self._after = after
        self._ttl_s = ttl_s

    def paused(self, url: str) -> bool:
        if self._after <= 0:
            return False
        try:
            count = self._broker.get(TIMEOUTS_PREFIX + endpoint_of(url))
        except redis.RedisError as error:
            log.warning("webhook endpoint pause of %s not read (%s)", endpoint_of(url), error)
            return False
        return count is not None and int(count) >= self._after

    def observe(self, url: str, *, answered: bool, timed_out: bool) -> None:
        """After a sent attempt: an answer closes the breaker; a timeout counts toward opening it."""
        key = TIMEOUTS_PREFIX + endpoint_of(url)
        try:
            if answered:
                self._broker.delete(key)
            elif timed_out:
                pipe = self._broker.pipeline()
                pipe.incr(key)
                pipe.expire(key, self._ttl_s)
                pipe.execute()
        except redis.RedisError as error:
            log.warning("webhook endpoint pause of %s not kept (%s)", endpoint_of(url), error)
