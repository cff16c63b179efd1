"""The read benchmark's node set-up (bench.live.node_setup): a worker declares it through the
reprise.worker_tasks entry point, never among the product's tasks; the message goes on the node's own
queue; a node that takes it starts over empty under the new set-up and shows it in its heartbeat."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from bench.live.node_setup import CONFIGURE_READS, configure_reads, register, send_setup
from core.settings import Settings, load_settings
from core.vocabulary import ReadStore, Role, Tiering
from db.blobs.local import LocalBlobStore
from jobs.celery_app import make_celery_app
from jobs.queues import TaskName, decode_queue
from jobs.read_routing import leave, node_snapshots
from tests.support.dispatch import RecordingDispatcher
from workers.bootstrap import TASK_PLUGINS, register_task_plugins
from workers.context import WorkerContext
from workers.decode_node import DecodeNode, NodeSetup


def test_the_worker_declares_the_bench_task_through_its_entry_point(tmp_path: Path) -> None:
    app = make_celery_app(load_settings(data_dir=tmp_path))
    assert register_task_plugins(app) == ["read_bench"]
    assert CONFIGURE_READS in app.tasks
    assert CONFIGURE_READS not in {task.value for task in TaskName}  # no product task, no route
    assert register_task_plugins(Celery("other"), group=f"{TASK_PLUGINS}.none") == []


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.delete(decode_queue("bench-node"))
    yield client
    client.delete(decode_queue("bench-node"))
    client.close()


@pytest.mark.integration
def test_the_set_up_goes_on_the_nodes_own_queue(
    service_settings: Settings, redis_url: str, broker: redis.Redis
) -> None:
    app = make_celery_app(service_settings.model_copy(update={"redis_url": redis_url}))
    send_setup(app, "bench-node", {"alpha": 0.0, "tiering": "fixed"})
    [raw] = broker.lrange(decode_queue("bench-node"), 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == CONFIGURE_READS
    assert json.loads(base64.b64decode(message["body"]))[0] == [{"alpha": 0.0, "tiering": "fixed"}]


@pytest.mark.integration
def test_a_node_takes_the_set_up_afresh_and_shows_it(
    service_settings: Settings, redis_url: str, tmp_path: Path
) -> None:
    settings = service_settings.model_copy(update={"redis_url": redis_url})
    context = WorkerContext(settings, Role.DECODE, dispatcher=RecordingDispatcher())
    blobs = LocalBlobStore(tmp_path / "blobs")
    node = DecodeNode("bench-node", NodeSetup.from_settings(settings), blobs=blobs, decode=lambda raw, _: raw)
    node.decodes = 3
    context.decode_node = node
    try:
        shown = configure_reads(context, {"alpha": 1.0, "tiering": "fixed", "store": "images", "window": 7})
        assert (node.setup.alpha, node.setup.tiering, node.setup.store) == (
            1.0,
            Tiering.FIXED,
            ReadStore.IMAGES,
        )
        assert node.decodes == 0 and shown["window"] == 7 and shown["store"] == "images"
        snapshot = node_snapshots(context.broker(), ["bench-node"])["bench-node"]
        assert snapshot["setup"]["window"] == 7
        with pytest.raises(ValueError, match="unknown read set-up fields"):
            configure_reads(context, {"colour": "blue"})
    finally:
        leave(context.broker(), "bench-node")


def test_register_declares_one_task() -> None:
    """register adds the read set-up and nothing else (a new app also holds every task shared by
    modules imported before, the product's among them when the session has loaded workers.tasks)."""
    app = Celery("bench-only")
    before = set(app.tasks)
    register(app)
    assert set(app.tasks) - before == {CONFIGURE_READS}
