"""The worker's main process judges its own liveness (workers.liveness) every liveness_period_s, writes
the verdict where the probes read it, and exits when it is not alive, so that whatever restarts an exited
process (the supervisor of `reprise run`, compose's `restart: unless-stopped`, Kubernetes) replaces it.

Started by Celery's worker_ready signal, in the main process, where the consumer is: the queues it
consumes now and those it should (the ones it started on, its new role's after a move; a consumer
cancelled on a queue still answers for its work), its pool's slots and the tasks it holds
(celery.worker.state).
The depth of those queues is read from the broker with a client of its own, short timeouts: a consumer
whose own connection went bad still has its queues counted. A worker that is not alive ends its whole
process group when it leads one (the pool children with it: a hung child would hold its GPU), else itself.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any, Final

import redis
from celery.signals import task_received, worker_ready
from celery.worker import state

from core.settings import Settings, get_settings
from jobs.broker import broker_client
from jobs.broker_contents import PRIORITY_SEP, PRIORITY_STEPS
from workers import liveness, role_switch

log = logging.getLogger(__name__)

EXIT_STALLED: Final = 75  # EX_TEMPFAIL: a restart may help
OVERRUN_GRACE_S: Final = 60.0  # past the task time limit, a prefork child's task is killed well within it


def queued_messages(client: redis.Redis, queues: Sequence[str]) -> int:
    """Messages waiting in `queues`, each queue's priority lists included (kombu's Redis transport)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        for name in (queue, *(f"{queue}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS)):
            pipe.llen(name)
    return sum(int(length) for length in pipe.execute())


class LivenessWatch:
    """Judges the worker whose consumer it was given, on a thread of its own."""

    def __init__(self, settings: Settings, consumer: Any, *, worker: str) -> None:
        self.settings = settings
        self.consumer = consumer
        self.worker = worker
        self.directory = liveness.report_dir(settings)
        self._broker = broker_client(settings, socket_timeout=2, socket_connect_timeout=2)
        self._started_as = role_switch.shared_role()
        self._started_on = self._consuming()
        self._broker_back = 0.0  # the last look that could not read the broker
        self._thread = threading.Thread(target=self._watch, name="liveness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        while True:
            verdict = self.judge_now()
            report = liveness.LivenessReport(
                os.getpid(), self.worker, time.time(), verdict.alive, verdict.reason
            )
            try:
                liveness.write_report(self.directory, report)
            except OSError as error:  # a full disk: the report goes stale, and the probe says so
                log.warning("the liveness report was not written: %s", error)
            if not verdict.alive:
                self._exit(verdict.reason)
            time.sleep(self.settings.liveness_period_s)

    def queues(self) -> list[str]:
        """The queues the worker consumes, and those it should: the ones it started on (`--queues`, a
        decode node's own) while it keeps its role, its new role's after a move (workers.role_switch). A
        consumer cancelled on a queue, or whose channel went bad, still has that queue's work counted."""
        consuming = self._consuming()
        role = role_switch.shared_role()
        if role is None or role is self._started_as:
            return sorted(consuming | self._started_on)
        return sorted(consuming | {queue.value for queue in role_switch.consumed_queues(role, self.settings)})

    def _consuming(self) -> set[str]:
        return {queue.name for queue in getattr(self.consumer.task_consumer, "queues", ())}

    def judge_now(self) -> liveness.Verdict:
        queues = self.queues()
        try:
            queued: int | None = queued_messages(self._broker, queues)
        except redis.RedisError:
            queued = None
            self._broker_back = time.time()
        free_slots = int(self.consumer.pool.limit or 1) - len(state.reserved_requests)
        started = [request.time_start for request in list(state.active_requests) if request.time_start]
        return liveness.judge(
            liveness.pulse().reading(),
            now=time.time(),
            queued=queued,
            free_slots=free_slots,
            stall_s=self.settings.worker_stall_s,
            broker_back=self._broker_back,
            oldest_task_s=time.time() - min(started) if started else None,
            overrun_s=self.settings.task_time_limit_s + OVERRUN_GRACE_S,
        )

    def _exit(self, reason: str) -> None:
        log.critical("worker %s is not alive (%s): exiting to be replaced", self.worker, reason)
        logging.shutdown()
        if os.getpgid(0) == os.getpid():  # it leads its group: the pool children go with it
            os.killpg(0, signal.SIGKILL)
        os._exit(EXIT_STALLED)


def _took(**_: Any) -> None:
    liveness.pulse().took()


def _start_watch(sender: Any = None, **_: Any) -> None:
    """The consumer is up: judge it from now on (main process)."""
    if sender is None:
        return
    LivenessWatch(get_settings(), sender, worker=str(getattr(sender, "hostname", "worker"))).start()


task_received.connect(_took)  # the consumer took a message (main process)
worker_ready.connect(_start_watch)
