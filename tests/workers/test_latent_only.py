"""Latent-only generation (LatentBox 4.1): a generation decodes only when something needs
pixels (an image-mode cache entry, an eager request), and every VAE decode is counted, per job and per
read. Against the real database and blob store, on the tiny models."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import select

from core.settings import Settings
from core.vocabulary import LookupMode, Role
from db import stats
from db.engine import session_scope
from db.models import CacheEntry, Job
from jobs.read_routing import ReadRequest
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.context import WorkerContext
from workers.decoding import read_image
from workers.generation import generate_job, reuse_job
from workers.runtime import runtime as runtime_module
from workers.runtime.latents import to_image, to_images

pytestmark = pytest.mark.integration

PROMPT = "a small red circle left of a blue square"


@pytest.fixture
def vae_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every latent-to-pixels VAE pass the runtime makes (whatever it counts itself)."""
    calls: list[int] = []

    def counted(vae: Any, latents: Any) -> Image.Image:
        calls.append(1)
        return to_image(vae, latents)

    def counted_together(vae: Any, latents: Any) -> list[Image.Image]:  # a decode node's batched decodes
        calls.extend(1 for _ in range(len(latents)))
        return to_images(vae, latents)

    monkeypatch.setattr(runtime_module, "to_image", counted)
    monkeypatch.setattr(runtime_module, "to_images", counted_together)
    yield calls


def _job(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


def _entry(settings: Settings, job_id: uuid.UUID) -> CacheEntry:
    with session_scope(settings) as session:
        entry = session.scalars(select(CacheEntry).where(CacheEntry.source_job_id == job_id)).one()
        session.expunge(entry)
        return entry


def _decodes(settings: Settings) -> stats.DecodeSummary:
    with session_scope(settings) as session:
        return stats.decode_summary(session, since=datetime.now(UTC) - timedelta(hours=1))


def _read(settings: Settings, context: WorkerContext, job_id: uuid.UUID, fmt: str) -> str:
    """One read on the decode node `context` hosts; the tier that answered it."""
    job = _job(settings, job_id)
    request = ReadRequest(
        str(job_id), fmt, job.final_latent_key, job.image_keys.get(fmt), uuid.uuid4().hex, "n1", "n1"
    )
    reply = read_image(context, request.as_json())
    assert reply.status == "ok", reply.message
    return reply.tier


def _run_miss(
    settings: Settings, dispatcher: RecordingDispatcher, **columns: Any
) -> tuple[uuid.UUID, WorkerContext]:
    context = WorkerContext(settings, Role.LARGE, dispatcher=dispatcher)
    job_id = make_job(settings, make_tenant(settings), PROMPT, route="miss", **columns)
    generate_job(context, job_id)
    return job_id, context


def test_a_text_mode_miss_and_hit_run_no_vae_decode_and_store_no_image(
    task_settings: Settings, dispatcher: RecordingDispatcher, vae_calls: list[int]
) -> None:
    before = _decodes(task_settings)
    job_id, context = _run_miss(task_settings, dispatcher)
    job = _job(task_settings, job_id)
    assert (vae_calls, context.runtime().vae_decodes, job.vae_decodes) == ([], 0, 0)
    assert job.image_keys == {} and job.final_latent_key is not None  # the latent alone
    entry = _entry(task_settings, job_id)
    assert entry.image_embedding is None  # text mode never reads it
    hit = make_job(
        task_settings,
        job.tenant_id,
        PROMPT,
        route="hit",
        k=20,
        source_entry_id=entry.id,
        admission_outcome="hit",
    )
    small = WorkerContext(task_settings, Role.SMALL, dispatcher=dispatcher)
    reuse_job(small, hit)
    assert (vae_calls, small.runtime().vae_decodes, _job(task_settings, hit).vae_decodes) == ([], 0, 0)
    after = _decodes(task_settings)
    assert after.generations - before.generations == 2
    assert after.generation_decodes == before.generation_decodes


def test_an_image_mode_miss_decodes_once_for_the_entrys_image_embedding(
    task_settings: Settings, dispatcher: RecordingDispatcher, vae_calls: list[int]
) -> None:
    settings = task_settings.model_copy(update={"lookup_mode": LookupMode.TEXT_TO_IMAGE})
    before = _decodes(settings)
    job_id, context = _run_miss(settings, dispatcher)
    job = _job(settings, job_id)
    assert (len(vae_calls), context.runtime().vae_decodes, job.vae_decodes) == (1, 1, 1)
    assert _entry(settings, job_id).image_embedding is not None
    assert job.image_keys == {}  # lazy: the pixels served the embedding, the read decodes again
    after = _decodes(settings)
    assert (after.generations - before.generations, after.generation_decodes - before.generation_decodes) == (
        1,
        1,
    )


def test_an_eager_request_has_its_png_stored_at_completion_and_the_first_read_decodes_nothing(
    task_settings: Settings, dispatcher: RecordingDispatcher, vae_calls: list[int]
) -> None:
    job_id, context = _run_miss(task_settings, dispatcher, decode_mode="eager")
    job = _job(task_settings, job_id)
    assert (len(vae_calls), job.vae_decodes) == (1, 1)
    key = job.image_keys["png"]
    image = Image.open(io.BytesIO(context.blobs.get(key)))
    assert (image.format, image.size) == ("PNG", (64, 64))
    before = _decodes(task_settings)
    node = WorkerContext(task_settings, Role.DECODE, dispatcher=dispatcher)
    assert _read(task_settings, node, job_id, "png") == "miss"  # the stored PNG is fetched: no decode
    assert (len(vae_calls), _decodes(task_settings).read_decodes) == (1, before.read_decodes)


def test_eager_in_image_mode_still_decodes_once(
    task_settings: Settings, dispatcher: RecordingDispatcher, vae_calls: list[int]
) -> None:
    settings = task_settings.model_copy(update={"lookup_mode": LookupMode.TEXT_TO_IMAGE})
    job_id, _ = _run_miss(settings, dispatcher, decode_mode="eager")
    job = _job(settings, job_id)
    assert (len(vae_calls), job.vae_decodes, sorted(job.image_keys)) == (1, 1, ["png"])
    assert _entry(settings, job_id).image_embedding is not None


def test_a_read_decode_is_counted_once_per_decode(
    task_settings: Settings, dispatcher: RecordingDispatcher, vae_calls: list[int]
) -> None:
    job_id, _ = _run_miss(task_settings, dispatcher)
    before = _decodes(task_settings)
    settings = task_settings.model_copy(update={"read_alpha": 1.0})  # images only: a read is cached
    node = WorkerContext(settings, Role.DECODE, dispatcher=dispatcher)
    assert _read(settings, node, job_id, "png") == "miss"
    assert _read(settings, node, job_id, "png") == "image"  # cached now: not decoded again
    assert _read(settings, node, job_id, "webp") == "miss"
    assert len(vae_calls) == 2
    assert _decodes(task_settings).read_decodes - before.read_decodes == 2
