"""The route table: every task has a queue, every Celery task is in the table, and a task sent
through the dispatcher lands on the Redis list of its queue and nowhere else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from core.settings import Settings
from jobs.celery_app import make_celery_app, task_routes
from jobs.dispatch import CeleryDispatcher
from jobs.queues import ROUTES, Queue, TaskName

# Celery's Redis transport keeps each queue as a list named after it, and messages with a priority
# above 0 on lists named queue + "\x06\x16" + step (kombu.transport.redis.Channel._q_for_pri).
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)


def _lists_of(queue: Queue) -> list[str]:
    return [queue.value, *(f"{queue.value}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS)]


def test_every_task_name_has_a_route() -> None:
    assert set(ROUTES) == set(TaskName)
    assert task_routes() == {task.value: {"queue": ROUTES[task].value} for task in TaskName}


def test_every_registered_task_is_routed_by_the_table_alone() -> None:
    from workers.tasks import app

    ours = {name for name in app.tasks if not name.startswith("celery.")}
    assert ours == {task.value for task in TaskName}
    for task in TaskName:
        assert getattr(app.tasks[task.value], "queue", None) is None  # the decorator names no queue
        routed = app.amqp.router.route({}, task.value)
        assert routed["queue"].name == ROUTES[task].value


@pytest.fixture
def routed_settings(service_settings: Settings, redis_url: str) -> Settings:
    return service_settings.model_copy(update={"redis_url": redis_url})


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    """This run's Redis database, every queue's lists emptied before and after each test."""
    client = redis.Redis.from_url(redis_url)
    lists = [name for queue in Queue for name in _lists_of(queue)]
    client.delete(*lists)
    yield client
    client.delete(*lists)
    client.close()


@pytest.mark.integration
@pytest.mark.parametrize("task", list(TaskName))
def test_each_task_lands_on_the_list_of_its_routed_queue_and_nowhere_else(
    task: TaskName, routed_settings: Settings, broker: redis.Redis
) -> None:
    dispatcher = CeleryDispatcher(make_celery_app(routed_settings))
    dispatcher._send(task, ["00000000-0000-0000-0000-000000000000"])

    waiting = {name: int(broker.llen(name)) for queue in Queue for name in _lists_of(queue)}
    assert {name: count for name, count in waiting.items() if count} == {ROUTES[task].value: 1}
    message = broker.lindex(ROUTES[task].value, 0)
    assert message is not None and task.value.encode() in message
