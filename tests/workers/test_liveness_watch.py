"""A real worker judges its liveness by its progress (workers.liveness_watch): idle with nothing to take, it
reports itself alive and `reprise worker-alive` exits 0; once its consumer stops while its queues hold work,
it reports itself not alive within worker_stall_s and exits, so that what supervises it starts another.

The io worker (no model to load) against the test database and a Redis database of this test's own; its
consumer is stopped with Celery's cancel_consumer, as a consumer that stopped after a failed ack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from core.settings import Settings
from core.vocabulary import Role
from jobs.celery_app import make_celery_app
from workers.role_switch import consumed_queues

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 120.0


def _until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return False


@pytest.fixture
def own_redis_url(redis_url: str) -> Iterator[str]:
    """A Redis database no other test's queues use: the worker consumes every io queue of it."""
    base, _, number = redis_url.rpartition("/")
    url = f"{base}/{1 + (int(number) + 3) % 15}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


def test_a_worker_whose_consumer_stopped_while_work_waits_says_so_and_exits(
    db_settings: Settings, own_redis_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "REPRISE_DATABASE_URL": db_settings.sqlalchemy_url,
        "REPRISE_REDIS_URL": own_redis_url,
        "REPRISE_DATA_DIR": str(tmp_path),
        "REPRISE_LIVENESS_PERIOD_S": "1",
        "REPRISE_WORKER_STALL_S": "3",
        "OMP_NUM_THREADS": "1",
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("ab") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "reprise", "worker", "--role", "io", "--name", "io-live@%h"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    reports = tmp_path / "liveness"
    try:
        report = reports / f"{worker.pid}.json"
        assert _until(report.exists, START_TIMEOUT_S), log_path.read_text()[-3000:]
        assert json.loads(report.read_text())["alive"] is True  # nothing to take
        probe = [sys.executable, "-m", "reprise", "worker-alive", "--pid", str(worker.pid)]
        alive = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=60)
        assert alive.returncode == 0 and "io-live@" in alive.stdout, alive.stdout + alive.stderr

        settings = db_settings.model_copy(update={"redis_url": own_redis_url})
        app = make_celery_app(settings)
        (node,) = {name for reply in app.control.ping(timeout=2.0) or [] for name in reply}
        queues = [queue.value for queue in consumed_queues(Role.IO, settings)]
        for queue in queues:  # the consumer stops: the process runs on, answering pings
            app.control.cancel_consumer(queue, destination=[node], reply=True, timeout=5.0)
        time.sleep(3)  # kombu's blocking read in flight (1 s) ends: the next ones leave these queues alone
        broker = redis.Redis.from_url(own_redis_url)
        broker.lpush(queues[0], json.dumps({"body": "", "headers": {}}))  # work waits in its queue
        broker.close()
        stopped_at = time.monotonic()
        assert _until(lambda: worker.poll() is not None, 30.0), "the stalled worker did not exit"
        within = time.monotonic() - stopped_at
        assert within < 3 + 1 + 10  # worker_stall_s, a period, and the rest of the way out
        text = log_path.read_text()
        assert "is not alive" in text and "the consumer stopped" in text, text[-3000:]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, 9)
            worker.wait()
