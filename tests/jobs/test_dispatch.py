"""The dispatcher: each kind of work becomes its task with its arguments, sent on the routed queue
with the publish retry policy."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from core.settings import load_settings
from core.vocabulary import HitPolicy, Priority, Route, WebhookEvent
from jobs.dispatch import PUBLISH_RETRY_POLICY, CeleryDispatcher
from jobs.queues import Queue, TaskName
from tests.support.dispatch import RecordingDispatcher, Sent

JOB = uuid.UUID("5f0c2d2e-6f1a-4d56-9a53-3f3c1d2b7e10")
SAME = load_settings(large_family="sd1", small_family="sd1")


def test_each_kind_of_work_becomes_its_task_with_its_arguments() -> None:
    dispatcher = RecordingDispatcher()
    dispatcher.admit(JOB)
    dispatcher.run_route(JOB, Route.MISS, SAME, priority=Priority.HIGH)
    dispatcher.run_route(JOB, Route.HIT, SAME, countdown=2.5)
    dispatcher.read_image("decode-a", {"job_id": str(JOB), "fmt": "webp"})
    dispatcher.forget_images("decode-b", JOB)
    dispatcher.deliver_webhook(JOB, WebhookEvent.COMPLETED, attempt=3, countdown=10.0)
    assert dispatcher.sent == [
        Sent(TaskName.ADMIT, (str(JOB),), None, priority=3),  # normal: kombu's step 3 (jobs.priority)
        Sent(TaskName.GENERATE, (str(JOB),), None, priority=0),  # high: step 0, taken first on Redis
        Sent(TaskName.REUSE, (str(JOB),), 2.5, priority=3),
        Sent(TaskName.READ_IMAGE, ({"job_id": str(JOB), "fmt": "webp"},), None, "decode.decode-a"),
        Sent(TaskName.FORGET_IMAGES, (str(JOB),), None, "decode.decode-b"),
        Sent(TaskName.DELIVER_WEBHOOK, (str(JOB), WebhookEvent.COMPLETED.value, 3), 10.0),
    ]
    assert dispatcher.of(TaskName.REUSE) == [Sent(TaskName.REUSE, (str(JOB),), 2.5, priority=3)]


class _FakeCelery:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def send_task(self, name: str, **options: Any) -> None:
        self.calls.append((name, options))


def test_celery_sends_by_name_on_the_routed_queue_and_a_zero_countdown_means_now() -> None:
    celery = _FakeCelery()
    dispatcher = CeleryDispatcher(celery)
    dispatcher.deliver_webhook(JOB, WebhookEvent.STARTED)
    dispatcher.deliver_webhook(JOB, WebhookEvent.COMPLETED, attempt=2, countdown=4.0)
    dispatcher.run_route(JOB, Route.MISS, SAME, countdown=0.0, priority=Priority.LOW)
    assert celery.calls == [
        (
            TaskName.DELIVER_WEBHOOK.value,
            {
                "args": [str(JOB), WebhookEvent.STARTED.value, 1],
                "queue": Queue.WEBHOOKS.value,
                "priority": None,  # not a job's run: the broker's default step
                "countdown": None,
                "retry": True,
                "retry_policy": PUBLISH_RETRY_POLICY,
            },
        ),
        (
            TaskName.DELIVER_WEBHOOK.value,
            {
                "args": [str(JOB), WebhookEvent.COMPLETED.value, 2],
                "queue": Queue.WEBHOOKS.value,
                "priority": None,
                "countdown": 4.0,
                "retry": True,
                "retry_policy": PUBLISH_RETRY_POLICY,
            },
        ),
        (
            TaskName.GENERATE.value,
            {
                "args": [str(JOB)],
                "queue": Queue.CACHE_MISS.value,
                "priority": 6,
                "countdown": None,
                "retry": True,
                "retry_policy": PUBLISH_RETRY_POLICY,
            },
        ),
    ]


@pytest.mark.parametrize(
    ("policy", "small_family", "task"),
    [
        # NIRVANA's resume of a large-family latent: only a model of that family can run it
        (HitPolicy.RESUME, "sdxl", TaskName.REUSE_LARGE),
        (HitPolicy.RESUME, "sd1", TaskName.REUSE),
        # MoDM's refine starts from a final latent: any small worker takes it
        (HitPolicy.REFINE, "sdxl", TaskName.REUSE),
    ],
)
def test_a_hit_is_sent_on_the_queue_of_the_workers_that_can_serve_it(
    policy: HitPolicy, small_family: str, task: TaskName
) -> None:
    settings = load_settings(hit_policy=policy, large_family="sd1", small_family=small_family)
    dispatcher = RecordingDispatcher()
    dispatcher.run_route(JOB, Route.HIT, settings)
    dispatcher.run_route(JOB, Route.MISS, settings)
    assert [sent.task for sent in dispatcher.sent] == [task, TaskName.GENERATE]
