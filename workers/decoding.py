"""The decode pool's task body: a stored final latent to an image, kept for later reads (LatentBox 4)."""

from __future__ import annotations

import logging
import uuid

from db import stats
from db.blobs import keys
from db.codec import decode_latent
from db.engine import session_scope
from db.images import encode_image, job_image, parse_image_format, record_image_key
from workers.context import WorkerContext

log = logging.getLogger(__name__)


def decode_job_image(context: WorkerContext, job_id: uuid.UUID, fmt: str) -> str | None:
    """Decode the job's final latent, store the image as `fmt`, record its key, count the decode
    (interval_stats.read_decodes). Idempotent: an image already stored is neither decoded nor counted."""
    image_format = parse_image_format(fmt)
    with session_scope(context.settings) as session:
        found = job_image(session, job_id, image_format.value)
    if found is None or found.latent_key is None:
        return None
    if found.image_key is not None:
        return found.image_key
    latent = decode_latent(context.blobs.get(found.latent_key))
    decoded = context.runtime().decode(latent.array, family=latent.family)
    key = keys.image_key(job_id, image_format.value)
    context.blobs.put(key, encode_image(decoded.image, image_format))
    with session_scope(context.settings) as session:
        record_image_key(session, job_id, image_format.value, key)
        stats.record_decodes(session, read_decodes=1)
    log.info("decoded job %s to %s in %.0f ms", job_id, image_format.value, decoded.wall_s * 1e3)
    return key
