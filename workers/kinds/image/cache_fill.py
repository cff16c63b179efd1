"""Filling the cache from a finished image generation (DESIGN: the miss path): its embeddings and latents
made and stored after making room in the scope's budget (`prepare_entry`), then its entry indexed in the
job's completion transaction (`PreparedEntry.index`), so that the entry exists exactly when the job
completed, and filling the cache costs the run no transaction of its own."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image
from sqlalchemy.orm import Session

from core.prompt_key import prompt_key
from core.scopes import insert_scope
from core.vocabulary import LookupMode
from db import cache
from db.blobs import keys
from db.codec.latent import encode_latent
from jobs.passes import eviction
from workers import metrics
from workers.context import WorkerContext
from workers.job import JobView
from workers.runtime.results import GenerationResult

# An entry per job, with an id derived from the job: a redelivered run inserts nothing twice.
ENTRY_NAMESPACE = uuid.UUID("5d0f4a4e-52c4-4b8e-9a53-6d1f1c2f7a10")


@dataclass(frozen=True)
class PreparedEntry:
    """An entry whose blobs are stored, to be indexed with the job's completion."""

    entry_id: uuid.UUID
    scope: str
    job: JobView
    result: GenerationResult
    text_embedding: npt.NDArray[np.float32] | None
    image_embedding: npt.NDArray[np.float32] | None
    final_key: str
    final_bytes: int
    states: list[cache.NewState]

    def index(self, session: Session) -> None:
        """Index the entry in `session` (the completion's transaction); nothing when a previous delivery
        of the job indexed it already."""
        if cache.entry_exists(session, self.entry_id):
            return
        params = self.job.params
        cache.insert_entry(
            session,
            entry_id=self.entry_id,
            scope=self.scope,
            model_family=self.result.family,
            prompt=params.prompt,
            text_embedding=self.text_embedding,
            image_embedding=self.image_embedding,
            final_latent_key=self.final_key,
            final_bytes=self.final_bytes,
            steps=self.result.steps,
            states=self.states,
            source_job_id=self.job.id,
            size=(params.width, params.height),
            prompt_key=prompt_key(params),
        )


def prepare_entry(
    context: WorkerContext,
    job: JobView,
    result: GenerationResult,
    final_blob: bytes,
    image: Image.Image | None,
) -> PreparedEntry:
    """Embed the entry and store its latents, after making room in the scope's budget. A redelivered run
    stores the same blobs under the same keys again (an entry's id derives from its job's), and its
    index finds the entry there (PreparedEntry.index)."""
    settings = context.settings
    entry_id = uuid.uuid5(ENTRY_NAMESPACE, str(job.id))
    scope = insert_scope(job.tenant_id, shared_cache=job.shared_cache)
    # An entry is embedded for the lookup of the mode it is cached in, the one that will read it: its
    # prompt in text mode (NIRVANA), its image in image mode (MoDM 5.2; embedding an image needs its
    # pixels, so a VAE decode at generation). Switching modes later finds only entries cached after the
    # switch. The prompt is embedded again here rather than carried from admission: in image mode
    # admission embeds it in CLIP's space, not the text embedder's.
    image_lookup = settings.lookup_mode is LookupMode.TEXT_TO_IMAGE
    text_embedding = None if image_lookup else context.text_embedder().embed_text([job.params.prompt])[0]
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
    return PreparedEntry(
        entry_id=entry_id,
        scope=scope,
        job=job,
        result=result,
        text_embedding=None if text_embedding is None else np.asarray(text_embedding, dtype=np.float32),
        image_embedding=image_embedding,
        final_key=final_key,
        final_bytes=len(final_blob),
        states=states,
    )


def embed_image(context: WorkerContext, image: Image.Image) -> npt.NDArray[np.float32]:
    """The image in CLIP space, for text-to-image lookup (MoDM 5.2)."""
    return np.asarray(context.image_embedder().embed_image([image])[0], dtype=np.float32)
