"""`Prefer: wait=N` (RFC 7240; Replicate's sync mode): a create or a read of a job answers when the job
ends, or after N seconds (at most MAX_WAIT_S), whichever comes first. A bare `Prefer: wait` waits
DEFAULT_WAIT_S, as Replicate's does.

A held request waits on the job's channel (jobs.job_events, announced by the worker that ended it)
through the process's one Listener, and looks at the job row every RECHECK_S seconds in case an
announcement was lost; it holds no thread and no database connection while it waits.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from api.reads import Listener
from core.settings import Settings
from jobs.broker import async_broker_client
from jobs.job_events import JOB_DONE_PREFIX, JOB_PROGRESS_PREFIX

MAX_WAIT_S = 60  # Replicate holds a sync request up to 60 s
# A bare `Prefer: wait` (no value): Replicate's sync mode holds it its whole 60 s, and so do we.
DEFAULT_WAIT_S = MAX_WAIT_S
RECHECK_S = 2.0
_WAIT = re.compile(r"^\s*wait\s*(?:=\s*\"?(\d+)\"?)?\s*$", re.IGNORECASE)


def preferred_wait(prefer: str | None) -> int | None:
    """The `wait` preference in seconds (1..MAX_WAIT_S; DEFAULT_WAIT_S for a bare `wait`), or None when
    the request states none. Other preferences, and a malformed wait, are ignored, as RFC 7240 asks."""
    if not prefer:
        return None
    for part in re.split(r"[,;]", prefer):
        match = _WAIT.match(part)
        if match:
            seconds = match.group(1)
            return DEFAULT_WAIT_S if seconds is None else max(1, min(MAX_WAIT_S, int(seconds)))
    return None


class JobWaiter:
    """Holds requests until their job ends, and event streams until it changes (per event loop, one
    Listener on the jobs' ends and one on their progress)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Listener, Listener]] = (
            weakref.WeakKeyDictionary()
        )

    def _both(self) -> tuple[Listener, Listener]:
        loop = asyncio.get_running_loop()
        found = self._listeners.get(loop)
        if found is None:
            client = async_broker_client(self.settings)
            found = (Listener(client, JOB_DONE_PREFIX), Listener(client, JOB_PROGRESS_PREFIX))
            self._listeners[loop] = found
        return found

    def _listener(self) -> Listener:
        return self._both()[0]

    def watch(self, job_id: str) -> Watch:
        """A registration for the job's next announcement (start, progress, end): take it before
        reading the job's row, then `await watch.wait(s)`, so that nothing announced between is lost."""
        try:
            listeners: tuple[Listener, ...] = self._both()
        except RedisError:
            listeners = ()
        return Watch(job_id, [(listener, listener.register(job_id)) for listener in listeners])

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


class Watch:
    """One registration on the job's channels (JobWaiter.watch)."""

    def __init__(self, job_id: str, futures: list[tuple[Listener, asyncio.Future[None]]]) -> None:
        self.job_id = job_id
        self.futures = futures

    async def wait(self, seconds: float) -> bool:
        """Whether the job announced something within `seconds` (False, after them, when Redis is down)."""
        if not self.futures:
            await asyncio.sleep(seconds)
            return False
        done, _ = await asyncio.wait(
            [future for _, future in self.futures], timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
        return bool(done)

    def close(self) -> None:
        for listener, future in self.futures:
            listener.unregister(self.job_id, future)
