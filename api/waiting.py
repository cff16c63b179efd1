"""`Prefer: wait=N` (RFC 7240; Replicate's sync mode): a create or a read of a job answers when the job
ends, or after N seconds (at most MAX_WAIT_S), whichever comes first.

A held request waits on the job's channel (jobs.job_events, announced by the worker that ended it)
through the process's one Listener, and looks at the job row every RECHECK_S seconds in case an
announcement was lost; it holds no thread and no database connection while it waits.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from api.reads import Listener
from core.settings import Settings
from jobs.job_events import JOB_DONE_PREFIX

MAX_WAIT_S = 60  # Replicate holds a sync request up to 60 s
RECHECK_S = 2.0
_WAIT = re.compile(r"^\s*wait\s*=\s*\"?(\d+)\"?\s*$", re.IGNORECASE)


def preferred_wait(prefer: str | None) -> int | None:
    """The `wait` preference in seconds (1..MAX_WAIT_S), or None when the request states none. Other
    preferences, and a malformed wait, are ignored, as RFC 7240 asks."""
    if not prefer:
        return None
    for part in re.split(r"[,;]", prefer):
        match = _WAIT.match(part)
        if match:
            return max(1, min(MAX_WAIT_S, int(match.group(1))))
    return None


class JobWaiter:
    """Holds requests until their job ends (one Listener per event loop)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Listener] = (
            weakref.WeakKeyDictionary()
        )

    def _listener(self) -> Listener:
        loop = asyncio.get_running_loop()
        listener = self._listeners.get(loop)
        if listener is None:
            listener = Listener(aioredis.Redis.from_url(self.settings.broker_url), JOB_DONE_PREFIX)
            self._listeners[loop] = listener
        return listener

    async def hold(self, job_id: str, seconds: float, ended: Callable[[], Awaitable[bool]]) -> None:
        """Return once `ended()` is true (checked on each announcement and every RECHECK_S) or after
        `seconds`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        try:
            listener: Listener | None = self._listener()
        except RedisError:
            listener = None
        while (left := deadline - loop.time()) > 0:
            woken = listener.register(job_id) if listener is not None else loop.create_future()
            try:
                if await ended():
                    return
                await asyncio.wait_for(asyncio.shield(woken), timeout=min(left, RECHECK_S))
            except TimeoutError:
                pass
            finally:
                if listener is not None:
                    listener.unregister(job_id, woken)
