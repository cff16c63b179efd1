"""Revoked keys heard from Redis (jobs.key_events): each API event loop holds one subscription, which
drops the key from the process's key cache (api.auth.CallerCache) and wakes the key's open event
streams (api/routes/events.py), which then close.

Keyed routes wait, on their loop's first request, until the subscription is in place (at most
SUBSCRIBE_WAIT_S), so that a key this process caches is one whose revocation it will hear.
"""

from __future__ import annotations

import asyncio
import contextlib

import redis.asyncio as aioredis

from api.auth import CallerCache
from api.reads import Listener
from jobs.key_events import KEY_REVOKED_PREFIX

SUBSCRIBE_WAIT_S = 1.0  # Redis down: requests go on, the cache's own life bounds a revocation's delay


class RevocationListener(Listener):
    """A Listener on every key's revocation channel that also forgets the key in the caller cache."""

    def __init__(self, client: aioredis.Redis, callers: CallerCache) -> None:
        self.callers = callers
        self.waited = False
        super().__init__(client, KEY_REVOKED_PREFIX)

    def _wake(self, image: str) -> None:  # `image` is the channel's key: here, the API key's hash
        self.callers.forget(image)
        super()._wake(image)

    async def subscribed(self) -> None:
        """Return once the subscription is in place, or after SUBSCRIBE_WAIT_S, the first time only: while
        Redis is away, requests are not held each time (the Listener resubscribes on its own)."""
        if self.ready.is_set() or self.waited:
            return
        self.waited = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ready.wait(), timeout=SUBSCRIBE_WAIT_S)
