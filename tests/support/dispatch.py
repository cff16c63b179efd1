"""RecordingDispatcher: a Dispatcher that puts nothing on a broker and records every task it is given,
for tests of task bodies (admission, generation, decoding) against the real database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from jobs.dispatch import Dispatcher, DispatcherBase
from jobs.queues import TaskName


class Sent(NamedTuple):
    """One recorded enqueue: the task, its arguments as they would go on the wire, its countdown."""

    task: TaskName
    args: tuple[Any, ...]
    countdown: float | None
    queue: str | None = None  # set when the task went to one node's queue (decode.<node>)
    priority: int | None = None  # the kombu priority step (jobs.priority), when one was given


class RecordingDispatcher(DispatcherBase):
    """Records every call as Sent(task, args, countdown), in order. The arguments come from the same
    code as CeleryDispatcher's (DispatcherBase), so they are exactly what a worker would receive."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def _send(
        self,
        task: TaskName,
        args: Sequence[Any],
        countdown: float | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> None:
        self.sent.append(Sent(task, tuple(args), countdown, queue, priority))

    def of(self, task: TaskName) -> list[Sent]:
        """The recorded sends of one task."""
        return [sent for sent in self.sent if sent.task is task]

    def clear(self) -> None:
        self.sent.clear()


_IMPLEMENTS: type[Dispatcher] = RecordingDispatcher  # mypy checks the double against the protocol
