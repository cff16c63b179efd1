"""One feed per followed job and API process: its event streams share one reader of the job.

A thousand streams on one job cost one row read per announcement, not a thousand: the feed wakes on the
job's announcements (jobs.job_events, through JobWaiter's Listeners) or every RECHECK_S, reads the job
once, and hands the new view to every stream following it. The feed lives while a stream follows the
job and stops at the job's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Final

from starlette.concurrency import run_in_threadpool

from api.waiting import JobWaiter
from core.vocabulary import TERMINAL_STATUSES
from jobs.representation import Generation

RECHECK_S: Final = 5.0  # in case an announcement was lost
log = logging.getLogger(__name__)


def visible(generation: Generation) -> tuple[object, ...]:
    """What a change is: status, progress step, queue place (not the estimates' drift)."""
    progress = generation.progress.step if generation.progress else None
    place = generation.queue.position if generation.queue else None
    return (generation.status, progress, place)


class JobFeed:
    """The latest view of one job and the streams waiting for the next."""

    def __init__(self) -> None:
        self.latest: Generation | None = None
        self.latest_json = ""  # serialized once for every stream
        self.version = 0
        self.followers = 0
        self.changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    async def publish(self, generation: Generation) -> None:
        text = json.dumps(generation.model_dump(mode="json", by_alias=True), separators=(",", ":"))
        async with self.changed:
            self.latest, self.latest_json = generation, text
            self.version += 1
            self.changed.notify_all()

    async def next_after(self, version: int, timeout: float) -> int:
        """Wait until a view newer than `version` is published, or `timeout`; the version now."""
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait_for(lambda: self.version > version), timeout)
            return self.version

    @property
    def ended(self) -> bool:
        return self.latest is not None and self.latest.status in TERMINAL_STATUSES


class JobFeeds:
    """The feeds of one event loop, by (job, base URL)."""

    def __init__(self, waiter: JobWaiter) -> None:
        self.waiter = waiter
        self.feeds: dict[Hashable, JobFeed] = {}

    @contextlib.asynccontextmanager
    async def follow(
        self, job_id: str, key: Hashable, load: Callable[[], Generation]
    ) -> AsyncIterator[JobFeed]:
        """The job's feed, started if no stream follows it yet, stopped when the last one leaves."""
        feed = self.feeds.get(key)
        if feed is None or (feed.task is not None and feed.task.done()):
            feed = JobFeed()
            self.feeds[key] = feed
            feed.task = asyncio.get_running_loop().create_task(self._run(job_id, feed, load))
        feed.followers += 1
        try:
            yield feed
        finally:
            feed.followers -= 1
            if feed.followers == 0:
                if self.feeds.get(key) is feed:
                    del self.feeds[key]
                if feed.task is not None:
                    feed.task.cancel()

    async def _run(self, job_id: str, feed: JobFeed, load: Callable[[], Generation]) -> None:
        shown: tuple[object, ...] | None = None
        while True:
            watch = self.waiter.watch(job_id)
            try:
                try:
                    generation = await run_in_threadpool(load)
                except Exception:  # the database is away: the streams keep their last view
                    log.warning("feed of job %s: could not read the job", job_id, exc_info=True)
                    await watch.wait(RECHECK_S)
                    continue
                if visible(generation) != shown:
                    shown = visible(generation)
                    await feed.publish(generation)
                if generation.status in TERMINAL_STATUSES:
                    return
                await watch.wait(RECHECK_S)
            finally:
                watch.close()
