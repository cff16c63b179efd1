"""The key layout of the blob store. Every key the service writes is built here.

    entries/<entry_id>/final.latent     the final latent of a cache entry
    entries/<entry_id>/k005.latent      the intermediate latent at step k (zero-padded: lists sort by k)
    entries/<entry_id>/k005.vstate      a video entry's compressed state at step k (db.codec.video)
    entries/<entry_id>/base.vbase       a video entry's base, which its states decode against
    entries/<entry_id>/mask.bits        a video entry's object mask, 1 bit a latent pixel
    jobs/<job_id>/final.a<n>.latent     a job's final latent, as its n-th run (attempt) stored it
    jobs/<job_id>/image.<format>        an encoded image served for a job
    jobs/<job_id>/image.video<fps>      a video job's animated WebP (db.images.video_format)

All of one entry's blobs sit under `entry_prefix(entry_id)`, so deleting an entry is
`store.delete_prefix(entry_prefix(entry_id))`; likewise a job's under `job_prefix(job_id)`.
The layout is part of the stored format: keys are also recorded in Postgres
(CacheEntry.final_latent_key, CacheState.blob_key, Job.image_keys), so changing it must keep
old keys readable.
"""

from __future__ import annotations

import re
import uuid

ENTRIES = "entries"
JOBS = "jobs"
LATENT_SUFFIX = ".latent"
VIDEO_STATE_SUFFIX = ".vstate"
MAX_K = 999  # three digits keep lexicographic order = numeric order; Settings caps steps at 1000

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_FORMAT = re.compile(r"[a-z0-9]+")


def _id_segment(value: uuid.UUID | str, what: str) -> str:
    text = str(value)
    if not _ID.fullmatch(text):
        raise ValueError(f"{what} {text!r} is not a usable key segment (letters, digits, '-', '_')")
    return text


def entry_prefix(entry_id: uuid.UUID | str) -> str:
    """'entries/<entry_id>/': the prefix shared by all of one cache entry's blobs."""
    return f"{ENTRIES}/{_id_segment(entry_id, 'entry id')}/"


def state_key(entry_id: uuid.UUID | str, k: int) -> str:
    """'entries/<entry_id>/k005.latent': the intermediate latent captured after step k (1..999)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"step k must be an integer in 1..{MAX_K}, got {k!r}")
    return f"{entry_prefix(entry_id)}k{k:03d}{LATENT_SUFFIX}"


def final_latent_key(entry_id: uuid.UUID | str) -> str:
    """'entries/<entry_id>/final.latent': the latent after the last step, before VAE decode."""
    return f"{entry_prefix(entry_id)}final{LATENT_SUFFIX}"


def video_state_key(entry_id: uuid.UUID | str, k: int) -> str:
    """'entries/<entry_id>/k005.vstate': a video entry's compressed state after step k (1..999)."""
    return state_key(entry_id, k).removesuffix(LATENT_SUFFIX) + VIDEO_STATE_SUFFIX


def video_base_key(entry_id: uuid.UUID | str) -> str:
    """'entries/<entry_id>/base.vbase': the base blob a video entry's states decode against."""
    return f"{entry_prefix(entry_id)}base.vbase"


def video_mask_key(entry_id: uuid.UUID | str) -> str:
    """'entries/<entry_id>/mask.bits': a video entry's packed object mask (workers.runtime.stitching)."""
    return f"{entry_prefix(entry_id)}mask.bits"


def job_prefix(job_id: uuid.UUID | str) -> str:
    """'jobs/<job_id>/': the prefix shared by all of one job's blobs."""
    return f"{JOBS}/{_id_segment(job_id, 'job id')}/"


def job_final_latent_key(job_id: uuid.UUID | str, attempt: int) -> str:
    """'jobs/<job_id>/final.a<attempt>.latent': the final latent a job's run stored. Each run (its
    claim's attempt number) writes its own key and the completion records the key of the run that held
    the lease, so a run that lost its lease and still stores cannot overwrite the one served: the write
    is fenced by the lease. (Older jobs' rows name 'jobs/<job_id>/final.latent', read as recorded.)"""
    if attempt < 0:
        raise ValueError(f"attempt must be a non-negative integer, got {attempt!r}")
    return f"{job_prefix(job_id)}final.a{attempt}{LATENT_SUFFIX}"


def image_key(job_id: uuid.UUID | str, fmt: str) -> str:
    """'jobs/<job_id>/image.<fmt>': a job's image in one format (an ImageFormat, e.g. 'png')."""
    fmt_text = str(fmt)
    if not _FORMAT.fullmatch(fmt_text):
        raise ValueError(f"image format {fmt_text!r} must be lowercase letters and digits, e.g. 'png'")
    return f"{job_prefix(job_id)}image.{fmt_text}"
