"""The per-tenant request rate limit: a token bucket per tenant in Redis, shared by every API process.

Each tenant's bucket holds up to REPRISE_RATE_LIMIT_BURST tokens and refills at REPRISE_RATE_LIMIT_PER_S;
every authenticated request takes one, and a request that finds none is answered 429 (`rate-limited`)
with Retry-After, the seconds until a token is back. The bucket is one Redis hash updated by one Lua
script on Redis's own clock, so several API processes (and hosts) share it without a race. It sits beside
the in-flight limit (how many of a tenant's jobs may be unfinished, checked at insert): this one bounds
requests of every kind, reads and polls included.

Admin keys (operators, the benchmarks) are not limited. An unreachable Redis limits nobody: the limiter
then stays out of the way for FAIL_OPEN_S instead of costing every request a connection timeout.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Final

import redis

log = logging.getLogger(__name__)

KEY_PREFIX: Final = "reprise:ratelimit:"
FAIL_OPEN_S: Final = 5.0

# KEYS[1] the tenant's bucket; ARGV rate (tokens/s), burst (capacity). Returns {allowed, wait_s as text}
# (Lua numbers come back to Redis truncated to integers). The bucket lapses once it would be full again.
TOKEN_BUCKET: Final = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(held[1]) or burst
local at = tonumber(held[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
return {allowed, tostring(wait)}
"""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a request may go on, and if not, how long until it may."""

    allowed: bool
    wait_s: float = 0.0

    @property
    def retry_after(self) -> int:
        """Retry-After's whole seconds: at least 1, never earlier than a token is back."""
        return max(1, math.ceil(self.wait_s))


class RateLimiter:
    """Takes a token from a tenant's bucket in Redis. `per_s` 0 turns the limit off."""

    def __init__(self, client: redis.Redis, *, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self._script = client.register_script(TOKEN_BUCKET)
        self._down_until = 0.0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.per_s > 0

    def take(self, tenant_id: uuid.UUID) -> Verdict:
        """A token for the tenant, or how long to wait for one; allowed while Redis cannot be reached."""
        if not self.enabled or time.monotonic() < self._down_until:
            return Verdict(True)
        try:
            allowed, wait = self._script(keys=[f"{KEY_PREFIX}{tenant_id}"], args=[self.per_s, self.burst])
        except redis.RedisError:
            with self._lock:
                if time.monotonic() >= self._down_until:
                    log.warning("rate limit: Redis unreachable, not limiting for %.0f s", FAIL_OPEN_S)
                    self._down_until = time.monotonic() + FAIL_OPEN_S
            return Verdict(True)
        return Verdict(bool(allowed), float(wait))
