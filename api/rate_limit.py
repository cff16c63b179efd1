"""Request rate limits: token buckets in Redis, shared by every API process. A tenant has one for the
requests of its keys; a client address has one for the requests that carry no valid key.

Each tenant's bucket holds up to REPRISE_RATE_LIMIT_BURST tokens and refills at REPRISE_RATE_LIMIT_PER_S;
every authenticated request takes one, and a request that finds none is answered 429 (`rate-limited`)
with Retry-After, the seconds until a token is back. The bucket is one Redis hash updated by one Lua
script on Redis's own clock, so several API processes (and hosts) share it without a race. It sits beside
the in-flight limit (how many of a tenant's jobs may be unfinished, checked at insert): this one bounds
requests of every kind, reads and polls included.

An address's bucket (REPRISE_ANONYMOUS_RATE_LIMIT_PER_S and _BURST; api.client_address says whose) is
the same script under another key: signed output downloads and /metrics without its token take a token,
and so does each 401, after the fact; a key that is not in the process's cache is looked up only while
its address has a token left (`peek`), so that guessing keys costs the database no more than the limit.

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

from api.problems import Problem

log = logging.getLogger(__name__)

KEY_PREFIX: Final = "reprise:ratelimit:"  # then the tenant's id, or ADDRESS and the client's address
ADDRESS: Final = "address:"
FAIL_OPEN_S: Final = 5.0

# KEYS[1] the bucket; ARGV rate (tokens/s), burst (capacity), cost (1 takes a token, 0 only asks whether
# one is there). Returns {allowed, wait_s as text} (Lua numbers come back to Redis truncated to integers).
# The bucket lapses once it would be full again.
TOKEN_BUCKET: Final = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(held[1]) or burst
local at = tonumber(held[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - cost
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
    """Takes tokens from buckets in Redis: a tenant's (its id) or an address's (`address_bucket`). `per_s`
    0 turns the limit off."""

    def __init__(self, client: redis.Redis, *, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self._script = client.register_script(TOKEN_BUCKET)
        self._down_until = 0.0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.per_s > 0

    def take(self, bucket: uuid.UUID | str) -> Verdict:
        """A token from the bucket, or how long to wait for one; allowed while Redis cannot be reached."""
        return self._ask(bucket, cost=1)

    def peek(self, bucket: uuid.UUID | str) -> Verdict:
        """Whether the bucket holds a token now, taking none."""
        return self._ask(bucket, cost=0)

    def _ask(self, bucket: uuid.UUID | str, *, cost: int) -> Verdict:
        if not self.enabled or time.monotonic() < self._down_until:
            return Verdict(True)
        try:
            allowed, wait = self._script(keys=[f"{KEY_PREFIX}{bucket}"], args=[self.per_s, self.burst, cost])
        except redis.RedisError:
            with self._lock:
                if time.monotonic() >= self._down_until:
                    log.warning("rate limit: Redis unreachable, not limiting for %.0f s", FAIL_OPEN_S)
                    self._down_until = time.monotonic() + FAIL_OPEN_S
            return Verdict(True)
        return Verdict(bool(allowed), float(wait))


def address_bucket(address: str) -> str:
    """The bucket of a client address's requests that carry no valid key."""
    return f"{ADDRESS}{address}"


def rate_limited(limiter: RateLimiter, verdict: Verdict, *, source: str) -> Problem:
    """The 429 for a request `source` (this tenant, this address) made past its limiter's rate."""
    return Problem(
        429,
        f"more than {limiter.per_s:g} requests per second (bursts of {limiter.burst}) from {source}; "
        f"retry in {verdict.retry_after} s",
        slug="rate-limited",
        headers={"Retry-After": str(verdict.retry_after)},
    )


class AddressLimit:
    """One request's client address and its bucket: `check` before a cost only a valid key may incur,
    `charge` for a request that turned out to carry none. Each raises the 429 when the bucket is empty."""

    def __init__(self, limiter: RateLimiter, address: str) -> None:
        self.limiter = limiter
        self.address = address

    def check(self) -> None:
        self._enforce(self.limiter.peek(address_bucket(self.address)))

    def charge(self) -> None:
        self._enforce(self.limiter.take(address_bucket(self.address)))

    def _enforce(self, verdict: Verdict) -> None:
        if not verdict.allowed:
            raise rate_limited(self.limiter, verdict, source="this address without a valid key")
