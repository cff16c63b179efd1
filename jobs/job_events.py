"""A job's events on Redis, for the API requests holding open on it (`Prefer: wait`, the event stream).

    reprise:job:done:<job id>       a message when the job reached a final status
    reprise:job:progress:<job id>   a message when it started, and as its steps go (at most every
                                    workers.run_watch.PROGRESS_EVERY_S): {"step": s, "total": T}

Best effort by design: a reader also looks at the job row every few seconds, so a lost announcement
costs it a little latency, never a wrong answer. The row holds the truth (status, progress_step).
"""

from __future__ import annotations

import json
import uuid

import redis

JOB_DONE_PREFIX = "reprise:job:done:"
JOB_PROGRESS_PREFIX = "reprise:job:progress:"


def job_done_channel(job_id: uuid.UUID | str) -> str:
    return f"{JOB_DONE_PREFIX}{job_id}"


def job_progress_channel(job_id: uuid.UUID | str) -> str:
    return f"{JOB_PROGRESS_PREFIX}{job_id}"


def announce_end(client: redis.Redis, job_id: uuid.UUID | str) -> None:
    client.publish(job_done_channel(job_id), "1")


def announce_progress(client: redis.Redis, job_id: uuid.UUID | str, *, step: int, total: int) -> None:
    client.publish(job_progress_channel(job_id), json.dumps({"step": step, "total": total}))


def announce_started(client: redis.Redis, job_id: uuid.UUID | str) -> None:
    """The job began running: a progress message without a step."""
    client.publish(job_progress_channel(job_id), "{}")
