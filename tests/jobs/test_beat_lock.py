"""One beat at a time, against a Redis of the test's own: two schedulers in this process (a stop hands the
lock over at once; a holder gone silent loses it after the TTL, and sends nothing once it wakes), then two
real `reprise beat` processes (only one sends; when it is killed, the other sends within the TTL; a
stopped beat releases the lock)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.beat import ScheduleEntry

from core.settings import load_settings
from jobs.beat_lock import LOCK_KEY, LockedScheduler
from jobs.celery_app import make_celery_app
from jobs.queues import Queue
from reprise.services.redis import EmbeddedRedis
from tests.support.redis_servers import scratch_redis

pytestmark = pytest.mark.integration

TTL_S = 1.5
RENEW_S = 0.25


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with scratch_redis(tmp_path_factory.mktemp("beat-redis")) as server:
        yield server


@pytest.fixture
def client(broker: EmbeddedRedis) -> redis.Redis:
    client = redis.Redis.from_url(broker.url)
    client.flushdb()
    return client


class Recording(LockedScheduler):
    """The scheduler as beat runs it, recording each periodic task it would send instead of sending."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sent: list[float] = []  # when, by time.monotonic()
        super().__init__(*args, **kwargs)

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        self.sent.append(time.monotonic())


def _app(broker: EmbeddedRedis) -> Celery:
    settings = load_settings(redis_url=broker.url, beat_lock_ttl_s=TTL_S, beat_lock_renew_s=RENEW_S)
    app = make_celery_app(settings)
    app.conf.beat_schedule = {"probe": {"task": "reprise.test.probe", "schedule": 0.1}}
    return app


def _tick(schedulers: list[Recording], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for scheduler in schedulers:
            scheduler.tick()
        time.sleep(0.02)


def test_two_schedulers_send_one_at_a_time_and_hand_over(
    broker: EmbeddedRedis, client: redis.Redis, tmp_path: Path
) -> None:
    app = _app(broker)
    first, second, third = (Recording(app=app, schedule_filename=str(tmp_path / name)) for name in "abc")
    waiting_file = next(
        path for path in (tmp_path / "b", tmp_path / "b.dat", tmp_path / "b.db") if path.exists()
    )
    os.utime(waiting_file, (0, 0))
    _tick([first, second], 1.0)
    assert len(first.sent) >= 5 and second.sent == []
    assert waiting_file.stat().st_mtime > 0  # a waiting beat looks alive to the liveness probe
    assert client.get(LOCK_KEY) == first.lock.token.encode()

    first.close()  # a beat that stops releases the lock: the other takes it at its next tick
    _tick([second], 0.3)
    assert second.sent and client.get(LOCK_KEY) == second.lock.token.encode()

    # A holder that falls silent (a stopped VM, a long pause) keeps the lock until the TTL lapses...
    silent_at = time.monotonic()
    _tick([third], TTL_S / 2)
    assert third.sent == []
    _tick([third], TTL_S)
    assert third.sent and third.sent[0] - silent_at < TTL_S + 2 * RENEW_S
    # ...and, awake again, finds it lost and sends nothing more.
    sent_before = len(second.sent)
    _tick([second, third], 0.5)
    assert len(second.sent) == sent_before and not second.lock.held
    third.close()
    second.close()
    assert client.get(LOCK_KEY) is None


def _origins(client: redis.Redis) -> list[str]:
    """The sender of every message on the maintenance queue, oldest first ('gen<pid>@<host>')."""
    raw = reversed(client.lrange(Queue.MAINTENANCE.value, 0, -1))  # LPUSHed: newest first
    return [json.loads(message)["headers"]["origin"] for message in raw]


def _lock_holder(client: redis.Redis) -> str:
    token = client.get(LOCK_KEY)
    return token.decode() if isinstance(token, bytes) else ""


def _until(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s}s")
        time.sleep(0.05)
    return time.monotonic()


def test_two_beat_processes_send_one_at_a_time_and_the_other_takes_over(
    broker: EmbeddedRedis, client: redis.Redis, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "REPRISE_REDIS_URL": broker.url,
        "REPRISE_BEAT_PERIOD_S": "0.3",
        "REPRISE_BEAT_LOCK_TTL_S": str(TTL_S),
        "REPRISE_BEAT_LOCK_RENEW_S": str(RENEW_S),
        "REPRISE_LOG_FORMAT": "text",
    }

    def beat(name: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-m", "reprise", "beat"],
            env={**env, "REPRISE_DATA_DIR": str(tmp_path / name)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    first = beat("first")
    second = beat("second")
    try:
        holder = ""

        def held() -> bool:
            nonlocal holder
            holder = _lock_holder(client)
            return bool(holder)

        _until(held, 60, "a beat holding the lock")
        sender, waiter = (first, second) if f":{first.pid}:" in holder else (second, first)
        log = tmp_path / ("second.log" if waiter is second else "first.log")
        _until(lambda: b"waits and tries again" in log.read_bytes(), 60, "the other beat waiting")
        _until(lambda: len(_origins(client)) >= 5, 30, "five periodic tasks sent")
        assert set(_origins(client)) == {f"gen{sender.pid}@{os.uname().nodename}"}

        sender.kill()  # dies holding the lock: the other takes over when it lapses
        killed_at = time.monotonic()
        sender.wait()
        taken_at = _until(lambda: f"gen{waiter.pid}@" in _origins(client)[-1], 30, "the takeover")
        assert taken_at - killed_at < TTL_S + 1.0
        assert _lock_holder(client).startswith(f"{os.uname().nodename}:{waiter.pid}:")

        waiter.send_signal(signal.SIGTERM)  # a beat that stops releases the lock
        assert waiter.wait(timeout=30) is not None
        assert client.get(LOCK_KEY) is None
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
                process.wait()
