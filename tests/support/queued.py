"""What waits on a queue in Redis, read as kombu's Redis transport keeps it: one list per priority step
(jobs.queues.step_lists), step 0 taken first, each list LPUSHed and taken from the other end."""

from __future__ import annotations

import base64
import json
from typing import Any

import redis

from jobs.queues import step_lists


def queued_messages(broker: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """Every message waiting on `queue`, in the order workers take them."""
    return [json.loads(raw) for name in step_lists(queue) for raw in reversed(broker.lrange(name, 0, -1))]


def queued_job_ids(broker: redis.Redis, queue: str) -> list[str]:
    """The first argument (a job's id) of every message waiting on `queue`, in the order workers take them."""
    return [json.loads(base64.b64decode(message["body"]))[0][0] for message in queued_messages(broker, queue)]
