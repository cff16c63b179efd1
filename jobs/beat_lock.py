"""One beat at a time: the scheduler sends the periodic tasks only while it holds a lock in Redis.

Any number of `reprise beat` processes may run, on any machines (a standby, or an update that starts
the new beat before the old one stops): the one holding the lock sends and renews it every
beat_lock_renew_s; the others wait, retrying, and log which beat holds it. A beat that stops releases
the lock and a waiting one takes over at its next try; a beat that dies leaves the lock to lapse
after beat_lock_ttl_s, and a waiting one takes over then (it retries when the lock would lapse).
The lock is a key in the broker's Redis, SET NX PX with a token naming its holder (redis-py's Lock),
so that a beat renews or releases only the lock it holds, and stops sending when it lost it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from typing import Any

import redis
from celery import Celery
from celery.beat import PersistentScheduler
from redis.exceptions import LockError, LockNotOwnedError

from jobs.broker import redis_client

log = logging.getLogger(__name__)

LOCK_KEY = "reprise:beat:lock"


class BeatLock:
    """The beat lock in Redis: acquired without waiting, renewed and released only by its holder."""

    def __init__(self, client: redis.Redis, *, ttl_s: float, key: str = LOCK_KEY) -> None:
        self.client = client
        self.key = key
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._lock = client.lock(key, timeout=ttl_s, thread_local=False)
        self.held = False

    def acquire(self) -> bool:
        """Take the lock if no beat holds it (SET NX PX); whether this beat holds it now."""
        self.held = bool(self._lock.acquire(blocking=False, token=self.token))
        return self.held

    def renew(self) -> bool:
        """Give the lock a full TTL again if this beat still holds it; whether it does."""
        try:
            self._lock.reacquire()
        except LockNotOwnedError:
            self.held = False
        return self.held

    def release(self) -> None:
        """Let another beat take the lock now, if this one holds it."""
        if self.held:
            self.held = False
            # LockError: it lapsed, or another beat took it meanwhile; nothing of ours to delete.
            with contextlib.suppress(LockError):
                self._lock.release()

    def holder(self) -> tuple[str | None, float]:
        """Who holds the lock (its token: host:pid:nonce), and in how many seconds it lapses unrenewed."""
        with self.client.pipeline() as pipe:
            pipe.get(self.key)
            pipe.pttl(self.key)
            token, left_ms = pipe.execute()
        holder = token.decode() if isinstance(token, bytes) else token
        return holder, max(0.0, left_ms / 1000)


class LockedScheduler(PersistentScheduler):  # type: ignore[misc]
    """Celery beat's scheduler (persistent schedule file) that ticks only while it holds the beat lock.

    The app's configuration names it (beat_scheduler) and carries the lock's settings
    (jobs.celery_app); a test may hand it a lock of its own."""

    def __init__(self, *args: Any, lock: BeatLock | None = None, **kwargs: Any) -> None:
        app: Celery = kwargs["app"] if "app" in kwargs else args[0]
        conf = app.conf
        self.renew_s: float = conf.reprise_beat_lock_renew_s
        self.lock = lock or BeatLock(
            redis_client(
                conf.broker_url,
                sentinel_master=conf.reprise_redis_sentinel_master,
                socket_timeout=self.renew_s,
                socket_connect_timeout=self.renew_s,
            ),
            ttl_s=conf.reprise_beat_lock_ttl_s,
        )
        self._renewed_at = 0.0
        self._seen_holder: str | None = None
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Send what is due if this beat holds the lock; else wait for it. Seconds until the next tick."""
        wait = self._wait_for_lock()
        if wait is not None:
            return wait
        return float(min(super().tick(*args, **kwargs), self.renew_s))

    def _wait_for_lock(self) -> float | None:
        """None while this beat holds the lock (renewed when due); else how long to wait before trying."""
        now = time.monotonic()
        try:
            if self.lock.held:
                if now - self._renewed_at < self.renew_s:
                    return None
                if self.lock.renew():
                    self._renewed_at = now
                    return None
                log.warning("beat lost the lock %s: it stops sending until it holds it again", self.lock.key)
            if self.lock.acquire():
                self._renewed_at = now
                self._seen_holder = None
                log.info(
                    "beat holds the lock %s (%s): it sends the periodic tasks", self.lock.key, self.lock.token
                )
                return None
            holder, lapses_in_s = self.lock.holder()
        except redis.RedisError as error:
            log.warning("beat cannot reach Redis for its lock %s (%s); it tries again", self.lock.key, error)
            return self.renew_s
        self._show_alive()
        if holder != self._seen_holder:
            log.info(
                "another beat (%s) holds the lock %s: this one (%s) waits and tries again",
                holder,
                self.lock.key,
                self.lock.token,
            )
            self._seen_holder = holder
        # Try again when the lock would lapse unrenewed (a dead holder's), at least every renewal period.
        return max(0.05, min(lapses_in_s + 0.01, self.renew_s))

    def _show_alive(self) -> None:
        # A waiting beat is alive: keep its schedule file as fresh as a sending one's, since the liveness
        # probe reads its age (deploy/kubernetes/base/beat.yaml). dbm.dumb adds .dat, ndbm .db.
        for suffix in ("", ".dat", ".db"):
            with contextlib.suppress(OSError):
                os.utime(f"{self.schedule_filename}{suffix}")

    def close(self) -> None:
        try:
            if self.lock.held:
                self.lock.release()
                log.info("beat released the lock %s: a waiting beat takes it at its next try", self.lock.key)
        except redis.RedisError as error:
            log.warning("beat could not release its lock %s (%s): it lapses on its own", self.lock.key, error)
        super().close()
