"""The decode task body against the real database: a stored final latent becomes an image of the job's
size, stored and recorded once per format."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable

import pytest
from PIL import Image

from core.settings import Settings
from core.vocabulary import Role
from db.engine import session_scope
from db.models import Job
from tests.workers.conftest import make_job, make_tenant
from workers.context import WorkerContext
from workers.decoding import decode_job_image
from workers.generation import generate_job

pytestmark = pytest.mark.integration


def _generated(settings: Settings, context_for: Callable[[Role], WorkerContext]) -> uuid.UUID:
    job_id = make_job(settings, make_tenant(settings), "a striped yellow background", route="miss")
    generate_job(context_for(Role.LARGE), job_id)
    return job_id


@pytest.mark.parametrize(("fmt", "pil_format"), [("png", "PNG"), ("webp", "WEBP"), ("jpeg", "JPEG")])
def test_a_stored_latent_decodes_to_an_image_of_the_jobs_size(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext], fmt: str, pil_format: str
) -> None:
    job_id = _generated(task_settings, context_for)
    decoder = context_for(Role.DECODE)
    key = decode_job_image(decoder, job_id, fmt)
    assert key is not None
    image = Image.open(io.BytesIO(decoder.blobs.get(key)))
    assert (image.format, image.size) == (pil_format, (64, 64))
    with session_scope(task_settings) as session:
        assert session.get_one(Job, job_id).image_keys == {fmt: key}


def test_a_second_decode_of_the_same_format_reuses_the_stored_image(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext]
) -> None:
    job_id = _generated(task_settings, context_for)
    decoder = context_for(Role.DECODE)
    key = decode_job_image(decoder, job_id, "png")
    assert key is not None
    decoder.blobs.put(key, b"kept")  # a second decode would overwrite this
    assert decode_job_image(decoder, job_id, "png") == key
    assert decoder.blobs.get(key) == b"kept"


def test_a_job_without_a_latent_decodes_nothing(
    task_settings: Settings, context_for: Callable[[Role], WorkerContext]
) -> None:
    job_id = make_job(task_settings, make_tenant(task_settings), "not generated yet")
    assert decode_job_image(context_for(Role.DECODE), job_id, "png") is None
    assert decode_job_image(context_for(Role.DECODE), uuid.uuid4(), "png") is None
