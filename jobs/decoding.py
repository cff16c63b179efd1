"""Reading images through the decode pool (LatentBox 4.3: decode on read, coalesce identical reads)."""

from __future__ import annotations

import time
import uuid

import redis

from core.errors import DecodeTimeout
from core.settings import Settings
from db.blobs.base import BlobStore
from db.engine import session_scope
from db.models import Job
from jobs.routing import send_decode

POLL_S = 0.05


class DecodePoolDecoder:
    """The API's ImageDecoder: asks the decode pool once per (job, format), waits for the stored image.

    Identical concurrent reads share one decode: the first reader takes a short Redis lock and
    sends the task; the others only wait for the image key to appear on the job row.
    """

    def __init__(self, settings: Settings, blobs: BlobStore, client: redis.Redis) -> None:
        self.settings = settings
        self.blobs = blobs
        self.client = client

    def decode(self, job_id: uuid.UUID, fmt: str) -> bytes:
        lock = f"reprise:decoding:{job_id}:{fmt}"
        wait_s = self.settings.decode_wait_s
        if self.client.set(lock, "1", nx=True, ex=max(1, int(wait_s))):
            send_decode(job_id, fmt)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with session_scope(self.settings) as session:
                job = session.get(Job, job_id)
                key = (job.image_keys or {}).get(fmt) if job is not None else None
            if key is not None:
                return self.blobs.get(key)
            time.sleep(POLL_S)
        raise DecodeTimeout(f"no decode of job {job_id} to {fmt} within {wait_s:.0f}s")
