"""A job's end, announced on Redis for the API requests holding open until it (`Prefer: wait`).

    reprise:job:done:<job id>    pub/sub channel: a message when the job reached a final status

Best effort by design: a reader also looks at the job row every few seconds, so a lost announcement
costs it a little latency, never a wrong answer.
"""

from __future__ import annotations

import uuid

import redis

JOB_DONE_PREFIX = "reprise:job:done:"


def job_done_channel(job_id: uuid.UUID | str) -> str:
    return f"{JOB_DONE_PREFIX}{job_id}"


def announce_end(client: redis.Redis, job_id: uuid.UUID | str) -> None:
    client.publish(job_done_channel(job_id), "1")
