"""The read benchmark's control of the decode nodes: a task each node runs to take a new set-up (one of
the four of `reprise bench reads`, bench.live.reads, each with an empty cache), and its sender.

Serving never changes a node's set-up: a node takes REPRISE_READ_* at start (workers.decode_node.
NodeSetup.from_settings). So the task is the bench's, declared on a worker's Celery app by `register`,
which the worker calls at start through the `reprise.worker_tasks` entry point (pyproject.toml,
workers.bootstrap.register_task_plugins): a stack started by `reprise run` takes the benchmark's
set-ups without knowing of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import Celery

from jobs.queues import decode_queue
from workers.context import WorkerContext, get_context
from workers.decoding import beat, decode_node

CONFIGURE_READS = "bench.configure_reads"  # not reprise.*: the product's tasks are jobs.queues.TaskName


def configure_reads(context: WorkerContext, changes: Mapping[str, Any]) -> dict[str, Any]:
    """This node under its set-up with `changes` (NodeSetup's fields), its cache and tuner started
    afresh; its heartbeat shows the new set-up at once. Unknown fields: ValueError."""
    node = decode_node(context)
    node.configure(node.setup.updated(changes))
    beat(context)
    return node.setup.as_json()


def register(app: Celery) -> None:
    """Declare the task on a worker's app (the `reprise.worker_tasks` entry point)."""

    @app.task(name=CONFIGURE_READS, shared=False)  # type: ignore[untyped-decorator]  # this app alone
    def configure_reads_task(changes: dict[str, Any]) -> dict[str, Any]:
        return configure_reads(get_context(), changes)


def send_setup(app: Celery, node: str, setup: Mapping[str, Any]) -> None:
    """Queue a new set-up on one decode node, on its own queue (decode.<node>): the bench's one message
    outside jobs.dispatch, which sends the product's tasks only."""
    app.send_task(CONFIGURE_READS, args=[dict(setup)], queue=decode_queue(node))
