"""A Celery task message as it lies in Redis, built without Celery's publish machinery.

What `celery.send_task` puts on kombu's Redis transport, byte for byte in its structure: the task
message of Celery's protocol v2 (headers, [args, kwargs, embed] as a base64 JSON body) in kombu's
envelope, pushed on the list named for the queue (the default exchange routes by queue name); and,
because the app sends them (task_send_sent_event), the `task-sent` event that Flower shows, published
on the `celeryev` fanout channel. No producer, connection or channel is set up per message: one costs
two small JSON dumps.

The API's intake (jobs.intake) publishes admissions with it, and CeleryDispatcher puts a resumed run at
the front of its queue with it; tests/api/test_intake.py holds it to what send_task writes, and
a real Celery worker consumes it.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from jobs.queues import PRIORITY_STEPS, ROUTES, TaskName, step_lists

EVENTS_EXCHANGE = "celeryev"  # Celery's event exchange, a fanout
SENT_EVENT = "task-sent"
# kombu's Redis transport names a fanout's channel /{db}.{exchange}/{routing key} (fanout_prefix).
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def _origin() -> str:
    """Celery's anon_nodename(): the sending process, gen<pid>@<host>."""
    return f"gen{os.getpid()}@{socket.gethostname()}"


def _utcoffset() -> int:
    """Celery's utcoffset(): hours west of UTC, as an event's receiver expects them."""
    offset = time.altzone if time.daylight and time.localtime().tm_isdst > 0 else time.timezone
    return offset // 3600


def _b64(payload: Any) -> str:
    return base64.b64encode(json.dumps(payload).encode()).decode()


@dataclass
class TaskMessages:
    """Messages of one task with positional arguments, for a broker on Redis database `db`."""

    task: TaskName
    db: int = 0
    queue: str = ""  # default: the route table's queue of the task
    origin: str = field(default_factory=_origin)
    reply_to: str = field(default_factory=lambda: str(uuid.uuid4()))  # unused: results are ignored
    _clock: itertools.count[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def __post_init__(self) -> None:
        self.queue = self.queue or ROUTES[self.task].value
        self.event_channel = f"/{self.db}.{EVENTS_EXCHANGE}/{SENT_EVENT.replace('-', '.')}"

    def queue_for(self, priority: int) -> str:
        """The list a message of this kombu priority step is pushed on (step 0: the queue's own name)."""
        return step_lists(self.queue)[PRIORITY_STEPS.index(priority)]

    def message(self, task_id: str, args: list[Any], *, priority: int = 0) -> str:
        """The task message for LPUSH on `self.queue_for(priority)` (what a worker consumes)."""
        headers: dict[str, Any] = {
            "lang": "py",
            "task": self.task.value,
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": repr(args),
            "kwargsrepr": "{}",
            "origin": self.origin,
            "ignore_result": False,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        }
        properties = {
            "correlation_id": task_id,
            "reply_to": self.reply_to,
            "delivery_mode": 2,  # persistent
            "delivery_info": {"exchange": "", "routing_key": self.queue},
            "priority": priority,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        }
        return json.dumps(
            {
                "body": _b64([args, {}, _EMBED]),
                "content-encoding": "utf-8",
                "content-type": "application/json",
                "headers": headers,
                "properties": properties,
            }
        )

    def sent_event(self, task_id: str, args: list[Any]) -> str:
        """The task-sent event for PUBLISH on `self.event_channel` (what Flower listens to)."""
        body = {
            "hostname": self.origin,
            "utcoffset": _utcoffset(),
            "pid": os.getpid(),
            "clock": next(self._clock),
            "uuid": task_id,
            "root_id": task_id,
            "parent_id": None,
            "name": self.task.value,
            "args": repr(args),
            "kwargs": "{}",
            "retries": 0,
            "eta": None,
            "expires": None,
            "queue": self.queue,
            "exchange": "",
            "routing_key": self.queue,
            "timestamp": time.time(),
            "type": SENT_EVENT,
        }
        properties = {
            "delivery_mode": 1,
            "delivery_info": {"exchange": EVENTS_EXCHANGE, "routing_key": SENT_EVENT.replace("-", ".")},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        }
        return json.dumps(
            {
                "body": _b64(body),
                "content-encoding": "utf-8",
                "content-type": "application/json",
                "headers": {"hostname": self.origin},
                "properties": properties,
            }
        )
