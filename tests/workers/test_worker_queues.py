"""`reprise worker --queues`: a worker consumes some of its role's queues, and a webhooks-only io
worker runs a threads pool (workers.bootstrap)."""

from __future__ import annotations

import pytest

from core.errors import SettingsError
from core.settings import Settings
from core.vocabulary import Role
from jobs.queues import Queue
from workers.bootstrap import chosen_queues, io_pool_arguments


def test_the_io_role_splits_into_deliveries_and_maintenance() -> None:
    settings = Settings.model_validate({"webhook_threads": 12})
    assert chosen_queues(Role.IO, settings, None) == (Queue.WEBHOOKS, Queue.MAINTENANCE)
    assert chosen_queues(Role.IO, settings, ("maintenance",)) == (Queue.MAINTENANCE,)
    webhooks = chosen_queues(Role.IO, settings, ("webhooks",))
    assert io_pool_arguments(webhooks, settings) == ["--pool=threads", "--concurrency=12"]
    assert io_pool_arguments((Queue.MAINTENANCE,), settings) is None  # prefork: the task limit holds
    assert io_pool_arguments((Queue.WEBHOOKS, Queue.MAINTENANCE), settings) is None


@pytest.mark.parametrize("only", [("cache_miss",), ("webhooks", "nope"), ()])
def test_a_queue_the_role_does_not_consume_is_refused_with_the_choices(only: tuple[str, ...]) -> None:
    with pytest.raises(SettingsError, match="consumes webhooks, maintenance"):
        chosen_queues(Role.IO, Settings.model_validate({}), only)
