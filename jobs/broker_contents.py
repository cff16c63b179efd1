"""Which jobs the broker still holds a task message for, read from kombu's Redis structures.

The reconcile pass re-sends a waiting job whose message was lost (Redis restarted without it, a task
that failed while Postgres was down, a worker killed with the message reserved). It used to take any
job waiting past stuck_after_s for lost, so a short stuck_after_s re-sent every job of a long queue
each period; a job whose message still waits in a queue, or was delivered to a worker a moment ago,
is not lost, and is left alone. One LRANGE per job queue and one read of the delivered-unacked set per
pass: a few hundred kilobytes for a thousand waiting jobs.

kombu's Redis transport keeps a queue as a list under its name (a priority above 0 under
name + sep + priority), and each message delivered and not yet acked in the hash `unacked` with its
delivery time in the sorted set `unacked_index`; a message there whose worker died stays until the
visibility timeout (REPRISE_VISIBILITY_TIMEOUT_S, 30 minutes), which is why only recent deliveries
count as held.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Sequence

import redis

from jobs.queues import Queue

# The queues whose tasks run a job, its id their one argument.
JOB_QUEUES = (
    Queue.ADMIT,
    Queue.CACHE_MISS,
    Queue.CACHE_HIT,
    Queue.CACHE_HIT_LARGE,
    Queue.CASCADE_LIGHT,
    Queue.CASCADE_HEAVY,
)
PRIORITY_SEP = "\x06\x16"  # kombu.transport.redis.Channel.sep
PRIORITY_STEPS = (3, 6, 9)  # kombu's PRIORITY_STEPS above 0
UNACKED, UNACKED_INDEX = "unacked", "unacked_index"  # kombu's unacked_key, unacked_index_key
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _job_ids(message: dict[str, object]) -> Iterable[uuid.UUID]:
    """The ids in a Celery message's argsrepr (the job id, for a job queue's task)."""
    headers = message.get("headers")
    argsrepr = headers.get("argsrepr") if isinstance(headers, dict) else None
    return (uuid.UUID(text) for text in UUID.findall(argsrepr if isinstance(argsrepr, str) else ""))


def _loads(raw: bytes | str) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def jobs_with_messages(
    client: redis.Redis, queues: Sequence[Queue], *, now: float, held_fresh_s: float
) -> set[uuid.UUID]:
    """Jobs named by a task message waiting in one of `queues` (JOB_QUEUES: the job's own tasks;
    Queue.WEBHOOKS: its deliveries), or by a message of theirs delivered to a worker within the last
    held_fresh_s seconds and not acked (a worker runs it; older ones belong to a worker that died)."""
    keys = [
        name
        for queue in queues
        for name in (queue.value, *(f"{queue.value}{PRIORITY_SEP}{p}" for p in PRIORITY_STEPS))
    ]
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.lrange(key, 0, -1)
    pipe.zrangebyscore(UNACKED_INDEX, now - held_fresh_s, "+inf")
    *queued, fresh_tags = pipe.execute()
    names = {queue.value for queue in queues}  # an unacked entry's routing key is its queue's name
    held: set[uuid.UUID] = set()
    for raw in (raw for messages in queued for raw in messages):
        message = _loads(raw)
        if isinstance(message, dict):
            held.update(_job_ids(message))
    if fresh_tags:
        for raw in client.hmget(UNACKED, fresh_tags):
            entry = _loads(raw) if raw is not None else None  # [message, exchange, routing key]
            if (
                isinstance(entry, list)
                and len(entry) == 3
                and isinstance(entry[0], dict)
                and entry[2] in names
            ):
                held.update(_job_ids(entry[0]))
    return held
