"""Filling the cache from a finished image generation: its latents stored, its entry indexed (DESIGN: the
miss path), after making room in the scope's budget."""

from __future__ import annotations

import uuid

import numpy as np
import numpy.typing as npt
from PIL import Image

from core.prompt_key import prompt_key
from core.scopes import insert_scope
from core.vocabulary import LookupMode
from db import cache
from db.blobs import keys
from db.codec.latent import encode_latent
from db.engine import session_scope
from jobs.passes import eviction
from workers import metrics
from workers.context import WorkerContext
from workers.job import JobView
from workers.runtime.results import GenerationResult

# An entry per job, with an id derived from the job: a redelivered run inserts nothing twice.
ENTRY_NAMESPACE = uuid.UUID("5d0f4a4e-52c4-4b8e-9a53-6d1f1c2f7a10")


def insert_entry(
    context: WorkerContext,
    job: JobView,
    result: GenerationResult,
    final_blob: bytes,
    image: Image.Image | None,
) -> None:
    """Store the run's latents and index the entry, after making room in the scope's budget."""
    settings = context.settings
    entry_id = uuid.uuid5(ENTRY_NAMESPACE, str(job.id))
    scope = insert_scope(job.tenant_id, shared_cache=job.shared_cache)
    with session_scope(settings) as session:
        if cache.entry_exists(session, entry_id):
            return  # a previous delivery of this job cached it already
    # The text embedding is always indexed; the image embedding only in image lookup mode
    # (REPRISE_LOOKUP_MODE=image), the one mode that reads it, since embedding an image needs its
    # pixels and so a VAE decode at generation. Entries cached in text mode have no image embedding:
    # switching to image mode later finds only entries cached after the switch. The prompt is
    # embedded again here rather than carried from admission: in image mode admission embeds it in
    # CLIP's space, not the text embedder's.
    text_embedding = context.text_embedder().embed_text([job.params.prompt])[0]
    image_lookup = settings.lookup_mode is LookupMode.TEXT_TO_IMAGE
    image_embedding = embed_image(context, image) if image_lookup and image is not None else None
    with metrics.timed(metrics.CODEC_SECONDS, operation="encode"):
        state_blobs = {
            k: encode_latent(latent, family=result.family, k=k)
            for k, latent in sorted(result.captured.items())
        }
    incoming = len(final_blob) + sum(len(blob) for blob in state_blobs.values())
    eviction.ensure_room(settings, context.blobs, scope=scope, incoming_bytes=incoming)
    states = []
    for k, blob in state_blobs.items():
        key = keys.state_key(entry_id, k)
        context.blobs.put(key, blob)
        states.append(cache.NewState(k=k, blob_key=key, bytes=len(blob)))
    final_key = keys.final_latent_key(entry_id)
    context.blobs.put(final_key, final_blob)
    with session_scope(settings) as session:
        cache.insert_entry(
            session,
            entry_id=entry_id,
            scope=scope,
            model_family=result.family,
            prompt=job.params.prompt,
            text_embedding=text_embedding,
            image_embedding=image_embedding,
            final_latent_key=final_key,
            final_bytes=len(final_blob),
            steps=result.steps,
            states=states,
            source_job_id=job.id,
            size=(job.params.width, job.params.height),
            prompt_key=prompt_key(job.params),
        )


def embed_image(context: WorkerContext, image: Image.Image) -> npt.NDArray[np.float32]:
    """The image in CLIP space, for text-to-image lookup (MoDM 5.2)."""
    return np.asarray(context.image_embedder().embed_image([image])[0], dtype=np.float32)
