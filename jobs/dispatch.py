"""The one way work is put on a queue: the Dispatcher, with a method per kind of work.

Every enqueue of the project goes through a Dispatcher: the API holds one (api.deps.AppState), each
worker process holds one (workers.context.WorkerContext). CeleryDispatcher sends through one private
`_send` that takes the queue from the route table (jobs.queues.ROUTES); the arguments each task takes
are written once, in DispatcherBase.

Enqueueing is best effort: Postgres holds the job first, and the reconciler re-enqueues any job left
'starting' too long, so a broker outage delays a job but never loses it.

The API's intake (jobs.intake) sends its admissions through AdmitPublisher instead: on asyncio,
a batch of admit messages in one Redis round trip, the messages built as send_task builds them
(jobs.celery_messages), so that the event loop never waits on a blocking publish.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from core.vocabulary import Allocator, Priority, Route, WebhookEvent
from jobs.priority import broker_step
from jobs.queues import ROUTES, TaskName, decode_queue, hit_task

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from celery import Celery

    from core.settings import Settings

# Fail fast when the broker is down: the API must answer, and the job is safe in Postgres anyway.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def route_task(route: Route, settings: Settings) -> TaskName:
    """The task that runs an admitted job on its route: a miss generates on the large pool, or under
    DiffServe's allocator goes light-first (cascade_light); an escalated one runs on the heavy model
    (cascade_heavy); a hit runs where a worker can serve it (jobs.queues.hit_task: cache_hit, or
    cache_hit_large when only the large model's latent family can resume it)."""
    if route is Route.MISS:
        return TaskName.GENERATE_LIGHT if settings.allocator is Allocator.DIFFSERVE else TaskName.GENERATE
    if route is Route.HEAVY:
        return TaskName.ESCALATE
    return hit_task(settings)


class Dispatcher(Protocol):
    """Puts tasks on the broker. Implementations raise on failure; callers decide if that matters."""

    def admit(self, job_id: uuid.UUID, priority: Priority = Priority.NORMAL) -> None:
        """Queue the admission of a job that is committed in Postgres as 'starting', at its priority's
        broker step (jobs.priority)."""

    def run_route(
        self,
        job_id: uuid.UUID,
        route: Route,
        settings: Settings,
        *,
        countdown: float | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> None:
        """Queue an admitted job on a pool that can run its route (hit or miss) under `settings`, at its
        priority's broker step."""

    def resume_route(self, job_id: uuid.UUID, route: Route, settings: Settings) -> None:
        """Queue a job whose run was interrupted (its lease lapsed) at the front of its route's queue:
        it is the oldest work there, and a fault must not send it behind every job that came since."""

    def read_image(self, node: str, request: Mapping[str, Any]) -> None:
        """Queue one image read on a decode node (jobs.read_routing.ReadRequest.as_json)."""

    def write_back(self, owner: str, request: Mapping[str, Any], payload_key: str) -> None:
        """Queue a spilled decode's result (parked in Redis under payload_key) for its owner's cache."""

    def forget_images(self, node: str, job_id: uuid.UUID) -> None:
        """Queue the removal of a job's images from a decode node's cache."""

    def deliver_webhook(
        self,
        job_id: uuid.UUID,
        event: WebhookEvent,
        *,
        attempt: int = 1,
        countdown: float | None = None,
        probe: bool = False,
    ) -> None:
        """Queue one delivery attempt of a job's webhook event (a probe: recorded only if delivered)."""

    def audit_hit(self, job_id: uuid.UUID, hit_score: float | None, final_key: str) -> None:
        """Queue the quality guard's audit of a completed hit (workers.audit)."""


class DispatcherBase(ABC):
    """The Dispatcher's methods over one `_send`: the arguments each task takes, written once.
    Subclasses say how a message is sent (CeleryDispatcher; tests.support's recording double)."""

    def admit(self, job_id: uuid.UUID, priority: Priority = Priority.NORMAL) -> None:
        self._send(TaskName.ADMIT, [str(job_id)], priority=broker_step(priority))

    def run_route(
        self,
        job_id: uuid.UUID,
        route: Route,
        settings: Settings,
        *,
        countdown: float | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> None:
        task = route_task(route, settings)
        self._send(task, [str(job_id)], countdown=countdown, priority=broker_step(priority))

    def resume_route(self, job_id: uuid.UUID, route: Route, settings: Settings) -> None:
        self._send_first(route_task(route, settings), [str(job_id)])

    def read_image(self, node: str, request: Mapping[str, Any]) -> None:
        self._send(TaskName.READ_IMAGE, [dict(request)], queue=decode_queue(node))

    def write_back(self, owner: str, request: Mapping[str, Any], payload_key: str) -> None:
        self._send(TaskName.WRITE_BACK, [dict(request), payload_key], queue=decode_queue(owner))

    def forget_images(self, node: str, job_id: uuid.UUID) -> None:
        self._send(TaskName.FORGET_IMAGES, [str(job_id)], queue=decode_queue(node))

    def deliver_webhook(
        self,
        job_id: uuid.UUID,
        event: WebhookEvent,
        *,
        attempt: int = 1,
        countdown: float | None = None,
        probe: bool = False,
    ) -> None:
        """Args of reprise.deliver_webhook: [job_id, event, attempt] and True for a probe (see
        workers.webhook_delivery)."""
        args: list[object] = [str(job_id), event.value, attempt, *([True] if probe else [])]
        self._send(TaskName.DELIVER_WEBHOOK, args, countdown=countdown)

    def audit_hit(self, job_id: uuid.UUID, hit_score: float | None, final_key: str) -> None:
        """Args of reprise.audit_hit: [job_id, hit_score, final_key] (see workers.audit)."""
        self._send(TaskName.AUDIT_HIT, [str(job_id), hit_score, final_key])

    @abstractmethod
    def _send(
        self,
        task: TaskName,
        args: Sequence[Any],
        countdown: float | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> None:
        """Publish `task` with `args` on `queue` (default: the route table's queue for the task), at
        kombu priority `priority` (None: the broker's default, step 0)."""

    def _send_first(self, task: TaskName, args: Sequence[Any]) -> None:
        """Publish `task` so that it is taken before what already waits on its queue; a broker that
        keeps no order to jump sends it as any other."""
        self._send(task, args)


class CeleryDispatcher(DispatcherBase):
    """A Dispatcher over a Celery app. Uses send_task by name, so no task module is imported here."""

    def __init__(self, celery: Celery) -> None:
        self.celery = celery

    @classmethod
    def for_settings(cls, settings: Settings) -> CeleryDispatcher:
        """Over a Celery app built for these settings. Build one per process and keep it."""
        from jobs.celery_app import make_celery_app  # deferred: celery is only needed to send

        return cls(make_celery_app(settings))

    def _send(
        self,
        task: TaskName,
        args: Sequence[Any],
        countdown: float | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> None:
        """Publish `task` on `queue` or the one the route table gives it, retrying the publish briefly."""
        self.celery.send_task(
            task.value,
            args=list(args),
            queue=queue or ROUTES[task].value,
            priority=priority,
            countdown=countdown or None,  # 0 means now: no eta on the message
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
        )

    def _send_first(self, task: TaskName, args: Sequence[Any]) -> None:
        """kombu's Redis transport LPUSHes a message and its consumers BRPOP the list's other end, so
        the message send_task would write, RPUSHed instead, is the next one taken (with its task-sent
        event, as send_task publishes it). Other brokers: an ordinary send."""
        import redis

        from jobs.celery_messages import TaskMessages

        url = str(self.celery.conf.broker_url or "")
        if not url.startswith(("redis://", "rediss://", "unix://")):
            self._send(task, args)
            return
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        try:
            messages = TaskMessages(task, db=int(client.connection_pool.connection_kwargs.get("db") or 0))
            task_id, arguments = str(uuid.uuid4()), list(args)
            pipe = client.pipeline(transaction=False)
            pipe.rpush(messages.queue, messages.message(task_id, arguments))
            pipe.publish(messages.event_channel, messages.sent_event(task_id, arguments))
            pipe.execute()
        finally:
            client.close()


class AdmitPublisher:
    """Queues admissions of committed jobs from asyncio code: each batch is one pipeline of LPUSH (the
    task messages) and PUBLISH (their task-sent events), over a client whose pool keeps its connections.
    Raises on failure, as a Dispatcher does; the caller leaves the jobs to the reconciler."""

    def __init__(self, client: aioredis.Redis) -> None:
        from jobs.celery_messages import TaskMessages

        self.client = client
        # kombu names the event channel with the database number (its fanout prefix, /{db}.)
        db = int(client.connection_pool.connection_kwargs.get("db") or 0)
        self.messages = TaskMessages(TaskName.ADMIT, db=db)

    async def admit(self, job_ids: Sequence[uuid.UUID], priorities: Sequence[Priority] = ()) -> None:
        """Queue the admission of each job (committed in Postgres as 'starting'), in this order, each at
        its priority's broker step (normal when `priorities` is shorter)."""
        if not job_ids:
            return
        tasks = [(str(uuid.uuid4()), [str(job_id)]) for job_id in job_ids]
        steps = [broker_step(p) for p in priorities] + [broker_step(Priority.NORMAL)] * len(job_ids)
        pipe = self.client.pipeline(transaction=False)
        # LPUSH takes them in order, and a worker pops from the other end (BRPOP): first in, first out;
        # each priority step is a list of its own (kombu's Redis transport), taken step 0 first.
        for (task_id, args), step in zip(tasks, steps, strict=False):
            pipe.lpush(self.messages.queue_for(step), self.messages.message(task_id, args, priority=step))
        for task_id, args in tasks:  # then, as send_task does, each one's task-sent event
            pipe.publish(self.messages.event_channel, self.messages.sent_event(task_id, args))
        await pipe.execute()

    async def close(self) -> None:
        await self.client.aclose()
