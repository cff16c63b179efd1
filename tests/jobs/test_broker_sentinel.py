"""A sentinel:// broker URL, against a real Redis and a real Sentinel started here: the settings take it,
the project's own clients reach the master through it, and a Celery task goes through it and back."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from core.errors import SettingsError
from core.settings import Settings, load_settings
from jobs.broker import async_broker_client, broker_client, transport_options
from jobs.celery_app import make_celery_app
from jobs.queues import ROUTES, TaskName
from reprise.services.redis import EmbeddedRedis, check_external_redis
from tests.support.redis_servers import free_port, scratch_redis, sentinel_watching

MASTER = "reprise-test"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sentinel_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, EmbeddedRedis]]:
    """Settings whose broker is a Redis behind a Sentinel, listed after a sentinel that is down (a
    client must move on to the next one), and that Redis itself, to look at directly."""
    root: Path = tmp_path_factory.mktemp("sentinel")
    with (
        scratch_redis(root / "master") as master,
        sentinel_watching(master, root, master_name=MASTER) as port,
    ):
        url = f"sentinel://127.0.0.1:{free_port()}/0;sentinel://127.0.0.1:{port}/0"
        yield load_settings(redis_url=url, redis_sentinel_master=MASTER), master


def test_the_settings_take_a_list_of_sentinels_and_refuse_a_mixed_one() -> None:
    settings = load_settings(redis_url="sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379")
    assert settings.broker_sentinel and transport_options(settings)["master_name"] == "mymaster"
    assert transport_options(load_settings(redis_url="redis://10.0.0.1:6379/0")) == {}
    with pytest.raises(SettingsError, match="not a sentinel://host:port"):
        load_settings(redis_url="sentinel://10.0.0.1:26379;redis://10.0.0.2:6379")


def test_the_broker_clients_read_and_write_the_master_through_sentinel(
    sentinel_broker: tuple[Settings, EmbeddedRedis],
) -> None:
    settings, master = sentinel_broker
    direct = redis.Redis(port=master.port)
    broker_client(settings, socket_timeout=2).set("reprise:test:sync", "through sentinel")
    assert direct.get("reprise:test:sync") == b"through sentinel"

    async def round_trip() -> bytes | None:
        # The read path's form: a bounded pool whose commands wait for a free connection.
        client = async_broker_client(settings, max_connections=2, wait_s=2.0)
        try:
            await client.set("reprise:test:async", "through sentinel too")
            got = await client.get("reprise:test:async")
            return got if isinstance(got, bytes) else None
        finally:
            await client.aclose()

    assert asyncio.run(round_trip()) == b"through sentinel too"
    assert direct.get("reprise:test:async") == b"through sentinel too"
    assert check_external_redis(settings).running  # `reprise services up` with a sentinel:// URL


def test_a_task_goes_through_sentinel_to_the_master_and_back(
    sentinel_broker: tuple[Settings, EmbeddedRedis],
) -> None:
    settings, master = sentinel_broker
    app = make_celery_app(settings)
    queue = ROUTES[TaskName.EVICT].value
    job = str(uuid.uuid4())
    sent = app.send_task(TaskName.EVICT.value, args=[job], queue=queue)
    assert redis.Redis(port=master.port).llen(queue) == 1  # the message sits on the master
    with app.connection_for_read() as connection:
        message = connection.SimpleQueue(queue).get(timeout=10)
        message.ack()
    assert (message.headers["task"], message.headers["id"]) == (TaskName.EVICT.value, sent.id)
    assert message.decode()[0] == [job]
