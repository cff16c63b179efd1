"""A worker's role at run time: shared with forked children, and taken up by the child between tasks."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import pytest

from core.errors import NotThisPool
from core.settings import Settings
from core.vocabulary import Role
from jobs.queues import Queue
from workers import pool_role
from workers.context import WorkerContext
from workers.pool_role import RoleCell, consumed_queues, enter_pool, queue_changes


@pytest.fixture
def cell() -> Iterator[RoleCell]:
    """This process as a worker's main process, hosting large; restored after."""
    before = pool_role._cell
    yield pool_role.install(Role.LARGE)
    pool_role._cell = before


def _read_after(
    cell: RoleCell, ready: multiprocessing.synchronize.Event, out: multiprocessing.queues.Queue[str]
) -> None:
    ready.wait(10)
    out.put(cell.get().value)


def test_a_child_forked_before_the_move_sees_the_new_role(cell: RoleCell) -> None:
    context = multiprocessing.get_context("fork")
    ready, out = context.Event(), context.Queue()
    child = context.Process(target=_read_after, args=(cell, ready, out))
    child.start()  # forked while the worker hosts large, like a pool child
    pool_role.set_shared_role(Role.SMALL)
    ready.set()
    assert out.get(timeout=10) == "small"
    child.join(10)


def test_queues_per_role_keep_misses_before_hits(tiny_settings: Settings) -> None:
    assert consumed_queues(Role.LARGE, tiny_settings) == (Queue.CACHE_MISS, Queue.CACHE_HIT)
    no_hits = tiny_settings.model_copy(update={"large_serves_hits": False})
    assert consumed_queues(Role.LARGE, no_hits) == (Queue.CACHE_MISS,)
    assert consumed_queues(Role.SMALL, tiny_settings) == (Queue.CACHE_HIT,)


@pytest.mark.parametrize(
    ("now", "wanted", "cancel", "add"),
    [
        # large -> small: only cache_miss goes; cache_hit keeps its consumer
        (["cache_miss", "cache_hit"], ["cache_hit"], ["cache_miss"], []),
        # small -> large: cache_miss must come first, so cache_hit is re-added behind it
        (["cache_hit"], ["cache_miss", "cache_hit"], ["cache_hit"], ["cache_miss", "cache_hit"]),
        # large without hits -> small: nothing in common
        (["cache_miss"], ["cache_hit"], ["cache_miss"], ["cache_hit"]),
        (["cache_miss", "cache_hit"], ["cache_miss", "cache_hit"], [], []),
        # the right queues in the wrong order: start over
        (
            ["cache_hit", "cache_miss"],
            ["cache_miss", "cache_hit"],
            ["cache_hit", "cache_miss"],
            ["cache_miss", "cache_hit"],
        ),
    ],
)
def test_queue_changes_keep_the_drain_order(
    now: list[str], wanted: list[str], cancel: list[str], add: list[str]
) -> None:
    assert queue_changes(now, wanted) == (cancel, add)


def test_a_moved_worker_refuses_a_queue_it_left_and_switches_models_for_one_it_takes(
    cell: RoleCell, tiny_settings: Settings
) -> None:
    context = WorkerContext(tiny_settings, Role.LARGE)
    large_model = context.runtime().model_name
    pool_role.set_shared_role(Role.SMALL)
    with pytest.raises(NotThisPool, match="small worker does not take cache_miss"):
        enter_pool(context, Queue.CACHE_MISS)
    assert context.role is Role.LARGE  # refused before anything changed
    enter_pool(context, Queue.CACHE_HIT)
    assert (context.owner.split(":")[0], context.runtime().role) == ("small", Role.SMALL)
    assert context.runtime().model_name != large_model


def test_outside_a_worker_the_context_keeps_its_role(tiny_settings: Settings) -> None:
    assert pool_role.shared_role() is None
    context = WorkerContext(tiny_settings, Role.SMALL)
    enter_pool(context, Queue.CACHE_HIT)
    assert context.role is Role.SMALL
    with pytest.raises(NotThisPool):
        enter_pool(context, Queue.CACHE_MISS)
