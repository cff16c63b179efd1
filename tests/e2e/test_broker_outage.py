"""A worker rides out a broker outage: Redis SIGKILLed for a minute while the worker holds unacked
messages (delayed webhook retries), then restarted from its append-only file.

With celery 5.7.0 the worker exited on the first connection loss (restoring unacked messages on a
collected connection: AttributeError 'hostname'); pyproject.toml excludes that release."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from celery import Celery

from core.settings import Settings
from jobs.celery_app import make_celery_app
from jobs.queues import TaskName
from reprise.services.redis import EmbeddedRedis
from tests.e2e.conftest import free_port

pytestmark = pytest.mark.integration

OUTAGE_S = 60.0  # workers ride out a broker outage of at least 60 s
HELD = 3


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout_s}s")


def _answers(app: Celery, name: str) -> bool:
    try:
        replies = app.control.ping(destination=[name], timeout=1.0) or []
    except redis.ConnectionError:  # the test's own pooled connection died with the old server
        return False
    return any(name in reply for reply in replies)


def test_a_worker_holding_unacked_messages_survives_a_minute_without_redis(
    db_settings: Settings, tmp_path: Path
) -> None:
    broker = EmbeddedRedis(root=tmp_path / "redis", port=free_port())
    broker.up()
    settings = db_settings.model_copy(update={"redis_url": broker.url})
    name = f"io-outage-{uuid.uuid4().hex[:6]}@test"
    env = {
        **os.environ,
        "REPRISE_DATABASE_URL": settings.sqlalchemy_url,
        "REPRISE_REDIS_URL": broker.url,
        "OMP_NUM_THREADS": "1",
    }
    log = (tmp_path / "worker.log").open("ab")
    worker = subprocess.Popen(
        [sys.executable, "-m", "reprise", "worker", "--role", "io", "--name", name],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    app = make_celery_app(settings)
    client = redis.Redis.from_url(broker.url)
    try:
        _wait(lambda: _answers(app, name), 120, "the worker's first ping")
        for _ in range(HELD):  # retries due in 5 minutes: the worker holds them, unacked
            app.send_task(
                TaskName.DELIVER_WEBHOOK.value,
                args=[str(uuid.uuid4()), "generation.completed"],
                countdown=300,
            )
        _wait(lambda: client.hlen("unacked") == HELD, 30, "the worker holding the messages")

        os.kill(int(broker.pidfile.read_text()), signal.SIGKILL)
        time.sleep(OUTAGE_S)
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]

        broker.up()  # same directory: the append-only file brings the messages back
        assert client.hlen("unacked") == HELD
        _wait(lambda: _answers(app, name), 90, "a ping after the outage")
        assert worker.poll() is None
        assert "Unrecoverable error" not in (tmp_path / "worker.log").read_text()
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        broker.down()
