"""A worker's role at run time: shared with forked children, taken up by the child between tasks, and
changed by the actuator's remote control commands."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from core.errors import NotThisPool
from core.settings import Settings
from core.vocabulary import Allocator, HitPolicy, Role, Route
from jobs.dispatch import route_task
from jobs.pools.policy import POOL_ROLES
from jobs.queues import ROUTES, Queue
from workers import role_switch
from workers.context import WorkerContext
from workers.role_switch import (
    RoleCell,
    consumed_queues,
    in_pool,
    move_queues,
    queue_changes,
    report_role,
    switch_role,
)


@pytest.fixture
def cell() -> Iterator[RoleCell]:
    """This process as a worker's main process, hosting large; restored after."""
    before = role_switch._cell
    yield role_switch.install(Role.LARGE)
    role_switch._cell = before


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
    role_switch.set_shared_role(Role.SMALL)
    ready.set()
    assert out.get(timeout=10) == "small"
    child.join(10)


def test_queues_per_role_keep_misses_before_hits(tiny_settings: Settings) -> None:
    large = (Queue.CACHE_MISS, Queue.CASCADE_HEAVY, Queue.CACHE_HIT_LARGE, Queue.CACHE_HIT)
    assert consumed_queues(Role.LARGE, tiny_settings) == large
    no_hits = tiny_settings.model_copy(update={"large_serves_hits": False})
    assert consumed_queues(Role.LARGE, no_hits) == (Queue.CACHE_MISS, Queue.CASCADE_HEAVY)
    # The small model is also the cascade's light one (DiffServe): hits first, then light stages.
    alone = tiny_settings.model_copy(update={"cohost": False})
    assert consumed_queues(Role.SMALL, alone) == (Queue.CACHE_HIT, Queue.CASCADE_LIGHT)
    # Co-hosting (the default, with batching threads, under MoDM's allocator): then misses on the large model.
    cohost = tiny_settings
    assert cohost.cohost and cohost.max_batch > 1
    cohosting = (Queue.CACHE_HIT, Queue.CASCADE_LIGHT, Queue.CACHE_MISS, Queue.CACHE_HIT_LARGE)
    assert consumed_queues(Role.SMALL, cohost) == cohosting
    for off in ({"max_batch": 1}, {"allocator": Allocator.DIFFSERVE}):
        assert consumed_queues(Role.SMALL, cohost.model_copy(update=off))[-1] == Queue.CASCADE_LIGHT
    # With the quality guard, audits come first on the large pool: taken last they starve under load.
    guarded = tiny_settings.model_copy(update={"quality_guard": True})
    assert consumed_queues(Role.LARGE, guarded) == (Queue.QUALITY_AUDIT, *large)
    assert Queue.QUALITY_AUDIT not in consumed_queues(Role.SMALL, guarded)


@pytest.mark.parametrize(
    ("policy", "small_family", "takers"),
    [
        (HitPolicy.RESUME, "other-family", {Role.LARGE}),  # only the large model resumes its latents
        (HitPolicy.RESUME, "tiny-sd", {Role.LARGE, Role.SMALL}),
        (HitPolicy.REFINE, "other-family", {Role.LARGE, Role.SMALL}),  # a refine runs on any model
    ],
)
def test_a_hit_is_consumed_only_by_workers_holding_a_model_that_can_serve_it(
    tiny_settings: Settings, policy: HitPolicy, small_family: str, takers: set[Role]
) -> None:
    update = {"hit_policy": policy, "small_family": small_family, "cohost": False}
    settings = tiny_settings.model_copy(update=update)
    queue = ROUTES[route_task(Route.HIT, settings)]
    assert {role for role in POOL_ROLES if queue in consumed_queues(role, settings)} == takers
    # A co-hosting small worker also holds the large model: it can serve every hit.
    cohosting = settings.model_copy(update={"cohost": True})
    assert {role for role in POOL_ROLES if queue in consumed_queues(role, cohosting)} == set(POOL_ROLES)


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
    context = WorkerContext(tiny_settings.model_copy(update={"cohost": False}), Role.LARGE)
    large_model = context.runtime().model_name
    role_switch.set_shared_role(Role.SMALL)
    with (
        pytest.raises(NotThisPool, match="small worker does not take cache_miss"),
        in_pool(context, Queue.CACHE_MISS),
    ):
        pass
    assert context.role is Role.LARGE  # refused before anything changed
    with in_pool(context, Queue.CACHE_HIT):
        pass
    assert (context.owner.split(":")[0], context.runtime().role) == ("small", Role.SMALL)
    assert context.runtime().model_name != large_model


def test_outside_a_worker_the_context_keeps_its_role(tiny_settings: Settings) -> None:
    assert role_switch.shared_role() is None
    context = WorkerContext(tiny_settings.model_copy(update={"cohost": False}), Role.SMALL)
    with in_pool(context, Queue.CACHE_HIT):
        assert context.role is Role.SMALL
    with pytest.raises(NotThisPool), in_pool(context, Queue.CACHE_MISS):
        pass


class FakeConsumer:
    """The parts of Celery's consumer a move touches: its task queues, and its event loop."""

    def __init__(self, queues: list[str]) -> None:
        self.task_consumer = SimpleNamespace(queues=[SimpleNamespace(name=name) for name in queues])
        self.soon: list[tuple[Any, tuple[Any, ...]]] = []

    @property
    def names(self) -> list[str]:
        return [queue.name for queue in self.task_consumer.queues]

    def call_soon(self, callback: Any, *args: Any) -> None:
        self.soon.append((callback, args))

    def cancel_task_queue(self, name: str) -> None:
        self.task_consumer.queues = [queue for queue in self.task_consumer.queues if queue.name != name]

    def add_task_queue(self, name: str) -> None:
        self.task_consumer.queues.append(SimpleNamespace(name=name))


def test_a_switch_is_answered_at_once_and_applied_on_the_event_loop(cell: RoleCell) -> None:
    consumer = FakeConsumer(["cache_miss", "cache_hit"])
    state = SimpleNamespace(consumer=consumer)
    assert report_role(state) == {"role": "large", "queues": ["cache_miss", "cache_hit"]}
    assert switch_role(state, "small") == {"ok": {"role": "small", "previous": "large"}}
    assert role_switch.shared_role() is Role.LARGE and consumer.names == ["cache_miss", "cache_hit"]
    [(callback, args)] = consumer.soon
    callback(*args)
    # A small worker co-hosts the large model by default: its misses come after hits and light stages.
    small = ["cache_hit", "cascade_light", "cache_miss", "cache_hit_large"]
    assert report_role(state) == {"role": "small", "queues": small}
    # Back to large: cache_miss must come before cache_hit again.
    move_queues(consumer, Role.LARGE, args[2])
    large = ["cache_miss", "cascade_heavy", "cache_hit_large", "cache_hit"]
    assert (role_switch.shared_role(), consumer.names) == (Role.LARGE, large)


def test_only_large_and_small_workers_move(cell: RoleCell) -> None:
    state = SimpleNamespace(consumer=FakeConsumer(["cache_miss", "cache_hit"]))
    assert "unknown role" in switch_role(state, "huge")["error"]
    assert "only large and small" in switch_role(state, "decode")["error"]
    assert switch_role(state, "large") == {"ok": {"role": "large", "previous": "large"}}
    assert state.consumer.soon == []  # already there: nothing to do


def test_a_cohosting_small_worker_runs_misses_on_the_large_model_and_hits_on_its_own(
    tiny_settings: Settings,
) -> None:
    context = WorkerContext(tiny_settings.model_copy(update={"cohost": True}), Role.SMALL)
    with in_pool(context, Queue.CACHE_HIT):
        assert (context.serving_role, context.runtime().role) == (Role.SMALL, Role.SMALL)
    for queue in (Queue.CACHE_MISS, Queue.CACHE_HIT_LARGE):
        with in_pool(context, queue):
            assert (context.serving_role, context.runtime().role) == (Role.LARGE, Role.LARGE)
    assert context.role is Role.SMALL and context.serving_role is Role.SMALL  # outside a task
    small_model = context.runtime()
    with in_pool(context, Queue.CACHE_HIT):
        assert context.runtime() is small_model  # both stay loaded: no switch between them
    # Without co-hosting the small worker refuses a miss.
    alone = WorkerContext(tiny_settings.model_copy(update={"cohost": False}), Role.SMALL)
    with pytest.raises(NotThisPool), in_pool(alone, Queue.CACHE_MISS):
        pass
