"""The decode contract: how the API reads an image that exists only as a latent (LatentBox 4.3:
decode on read, coalesce identical reads). The ImageDecoder protocol, and DecodePoolDecoder, the
API's implementation, which asks the decode pool through the dispatcher and waits for the image."""

from __future__ import annotations

import time
import uuid
from typing import Protocol

import redis

from core.errors import DecodeTimeout
from core.settings import Settings
from db.blobs.base import BlobStore
from db.engine import session_scope
from db.images import decoded_image_key
from jobs.dispatch import Dispatcher

POLL_S = 0.05


class ImageDecoder(Protocol):
    """Turns a succeeded job's final latent into an encoded image.

    Contract: return the image bytes in `fmt` ('png', 'webp' or 'jpeg'); raise DecodeTimeout when
    the decode pool does not answer in time, and core.errors.BlobNotFound when the latent is gone.
    """

    def decode(self, job_id: uuid.UUID, fmt: str) -> bytes: ...


class DecodePoolDecoder:
    """The API's ImageDecoder: asks the decode pool once per (job, format), waits for the stored image.

    Identical concurrent reads share one decode: the first reader takes a short Redis lock and
    sends the task; the others only wait for the image key to appear on the job row.
    """

    def __init__(
        self, settings: Settings, blobs: BlobStore, client: redis.Redis, dispatcher: Dispatcher
    ) -> None:
        self.settings = settings
        self.blobs = blobs
        self.client = client
        self.dispatcher = dispatcher

    def decode(self, job_id: uuid.UUID, fmt: str) -> bytes:
        lock = f"reprise:decoding:{job_id}:{fmt}"
        wait_s = self.settings.decode_wait_s
        if self.client.set(lock, "1", nx=True, ex=max(1, int(wait_s))):
            self.dispatcher.decode_image(job_id, fmt)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with session_scope(self.settings) as session:
                key = decoded_image_key(session, job_id, fmt)
            if key is not None:
                return self.blobs.get(key)
            time.sleep(POLL_S)
        raise DecodeTimeout(f"no decode of job {job_id} to {fmt} within {wait_s:.0f}s")
