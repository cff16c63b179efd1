"""Deliveries in flight per webhook endpoint, bounded across every webhook consumer: a counting
semaphore in Redis (a sorted set per endpoint of holder -> expiry, on Redis's own clock), so that one
slow or hanging endpoint holds at most REPRISE_WEBHOOK_ENDPOINT_CONCURRENCY of the pool's threads and
every other tenant's deliveries keep the rest.

A holder that dies keeps its slot only until its expiry (the attempt's deadline plus a margin). Without
Redis the slots are not kept (best effort): deliveries go on, unbounded, rather than stop.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import redis

from jobs.policies.webhook_recovery import endpoint_of

log = logging.getLogger(__name__)

SLOTS_PREFIX = "reprise:webhooks:slots:"

# KEYS[1]: the endpoint's set; ARGV: capacity, holder, hold seconds. Expired holders leave first.
_ACQUIRE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
return 1
"""

HOLD_MARGIN_S = 5.0  # past the attempt's deadline: recording the outcome, a slow Postgres commit


class EndpointSlots:
    def __init__(self, broker: redis.Redis, *, capacity: int, deadline_s: float) -> None:
        self._broker = broker
        self._capacity = capacity
        self._hold_s = math.ceil(deadline_s + HOLD_MARGIN_S)
        self._acquire = broker.register_script(_ACQUIRE)

    @contextmanager
    def hold(self, url: str) -> Iterator[bool]:
        """Take one of the endpoint's slots for the block; yields False when every slot is taken (send
        nothing then: the caller queues the delivery again)."""
        key = SLOTS_PREFIX + endpoint_of(url)
        holder = uuid.uuid4().hex
        try:
            taken = bool(self._acquire(keys=[key], args=[self._capacity, holder, self._hold_s]))
        except redis.RedisError as error:
            log.warning("webhook endpoint slots of %s not kept (%s)", endpoint_of(url), error)
            yield True
            return
        try:
            yield taken
        finally:
            if taken:
                with suppress(redis.RedisError):  # else the slot expires by itself
                    self._broker.zrem(key, holder)

    def in_use(self, url: str) -> int:
        """Slots of the endpoint held now (expired holders included until the next acquire)."""
        return int(self._broker.zcard(SLOTS_PREFIX + endpoint_of(url)))
