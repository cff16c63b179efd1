"""A video job's runs against the real database and blob store, on the tiny video model (FlexCache):
 a miss stores its WebP and caches every capture step, compressed, in the tenant's video
scope; a whole hit resumes T - k steps and caches the steps after k; a decoupled hit stitches two
entries' states and counts a use of both; a hit whose source vanished or does not fit runs as a miss;
cancel stops a video run."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import select, update

from core.scopes import tenant_scope, video_scope
from core.settings import Settings
from core.usage import INSERTION_USES
from core.vocabulary import JobStatus, Role, Route
from db.codec.latent import decode_latent
from db.engine import session_scope
from db.images import video_format
from db.models import CacheEntry, CacheState, Job
from jobs.dispatch import route_task
from tests.support.dispatch import RecordingDispatcher
from tests.workers.conftest import make_job, make_tenant
from workers.context import WorkerContext
from workers.job import JobView, claim_job
from workers.kinds.video import generation as video_generation
from workers.kinds.video.cache_fill import video_entry_id
from workers.kinds.video.generation import run_video_hit, run_video_miss
from workers.lease import LeaseKeeper
from workers.runtime.stitching import Latent, Mask, stitch

pytestmark = pytest.mark.integration

STEPS, CAPTURE, FRAMES, K = 10, [2, 4, 6, 8], 8, 4
FOX, CAT, FOX_ON_MOON = "a red fox in a forest", "a cat on the moon", "a red fox on the moon"
Body = Callable[[WorkerContext, JobView, LeaseKeeper], None]


@pytest.fixture
def video_settings(task_settings: Settings) -> Settings:
    """A short schedule (T = 10, states at 2, 4, 6, 8) and small videos keep the tiny model's runs short."""
    return task_settings.model_copy(update={"steps": STEPS, "capture_steps": CAPTURE})


@pytest.fixture
def context(video_settings: Settings, dispatcher: RecordingDispatcher) -> WorkerContext:
    return WorkerContext(video_settings, Role.LARGE, dispatcher=dispatcher)


WEBP = video_format(8)  # the read path's name of the jobs' WebP (8 fps)


def _video_job(settings: Settings, tenant: uuid.UUID, prompt: str, **columns: object) -> uuid.UUID:
    video = {"kind": "video", "frames": FRAMES, "fps": 8, "steps": STEPS, "width": 64, "height": 64}
    return make_job(settings, tenant, prompt, **(video | columns))


def _hit_job(
    settings: Settings, tenant: uuid.UUID, prompt: str, source: uuid.UUID, background: uuid.UUID | None = None
) -> uuid.UUID:
    return _video_job(
        settings,
        tenant,
        prompt,
        route="hit",
        admission_outcome="hit",
        k=K,
        source_entry_id=source,
        background_entry_id=background,
        video_hit="whole" if background is None else "decoupled",
    )


def _run(context: WorkerContext, job_id: uuid.UUID, body: Body) -> None:
    job = claim_job(context, job_id)
    assert job is not None and job.kind == "video"
    with LeaseKeeper(context.settings, job.id, owner=context.owner) as lease:
        body(context, job, lease)


def _job(settings: Settings, job_id: uuid.UUID) -> Job:
    with session_scope(settings) as session:
        job = session.get_one(Job, job_id)
        session.expunge(job)
        return job


def _entry(settings: Settings, entry_id: uuid.UUID) -> tuple[CacheEntry, dict[int, int]]:
    """The entry and its states' access counts, k -> count."""
    with session_scope(settings) as session:
        entry = session.get_one(CacheEntry, entry_id)
        session.expunge(entry)
        rows = session.execute(
            select(CacheState.k, CacheState.access_count).where(CacheState.entry_id == entry_id)
        )
        return entry, {int(k): int(count) for k, count in rows}


def _miss(context: WorkerContext, tenant: uuid.UUID, prompt: str, **columns: object) -> uuid.UUID:
    job_id = _video_job(
        context.settings, tenant, prompt, route="miss", admission_outcome="searched_miss", **columns
    )
    _run(context, job_id, run_video_miss)
    return job_id


def _final_latent(context: WorkerContext, job: Job) -> np.ndarray:
    assert job.final_latent_key is not None
    return np.asarray(decode_latent(context.blobs.get(job.final_latent_key)).array, dtype=np.float64)


def test_a_miss_stores_its_webp_and_caches_every_capture_step_in_the_video_scope(
    context: WorkerContext, video_settings: Settings
) -> None:
    tenant = make_tenant(video_settings)
    job = _job(video_settings, _miss(context, tenant, FOX, decode_mode="eager"))  # the WebP now
    assert job.status == JobStatus.SUCCEEDED
    assert job.denoiser_evals == {video_settings.video_model_name: STEPS} and job.vae_decodes == 1
    webp_key = job.image_keys.get(WEBP)
    assert webp_key is not None
    with Image.open(io.BytesIO(context.blobs.get(webp_key))) as webp:
        assert (webp.format, webp.size, getattr(webp, "n_frames", 1)) == ("WEBP", (64, 64), FRAMES)
    entry, states = _entry(video_settings, video_entry_id(job.id))
    assert (
        entry.scope == video_scope(tenant_scope(tenant)) and entry.model_family == video_settings.video_family
    )
    assert (entry.frames, entry.width, entry.height, entry.steps) == (FRAMES, 64, 64, STEPS)
    assert sorted(states) == CAPTURE
    assert entry.object_embedding is not None and entry.background_embedding is not None  # fox / forest
    own = [entry.base_key, entry.mask_key, entry.final_latent_key]
    assert entry.bytes == sum(len(context.blobs.get(key)) for key in own if key is not None)
    assert None not in own


def test_a_whole_hit_resumes_t_minus_k_steps_and_caches_only_the_steps_after_k(
    context: WorkerContext, video_settings: Settings
) -> None:
    tenant = make_tenant(video_settings)
    miss = _job(video_settings, _miss(context, tenant, FOX))
    source = video_entry_id(miss.id)
    hit_id = _hit_job(video_settings, tenant, FOX, source)
    _run(context, hit_id, run_video_hit)

    hit = _job(video_settings, hit_id)
    assert hit.status == JobStatus.SUCCEEDED
    assert WEBP not in hit.image_keys and hit.vae_decodes == 0  # lazy: decoded on the first read
    assert hit.denoiser_evals == {video_settings.video_model_name: STEPS - K}
    _, new_states = _entry(video_settings, video_entry_id(hit_id))
    assert sorted(new_states) == [k for k in CAPTURE if k > K]
    entry, states = _entry(video_settings, source)
    assert entry.access_count == INSERTION_USES + 1 and states[K] == INSERTION_USES + 1
    assert states[2] == INSERTION_USES  # only the state resumed from is used
    # The same prompt and seed from the compressed state (error bounded at 1e-3) ends where the miss did.
    ran, reference = _final_latent(context, hit), _final_latent(context, miss)
    assert np.linalg.norm(ran - reference) / np.linalg.norm(reference) < 1e-2


def test_a_decoupled_hit_stitches_two_entries_and_uses_both(
    context: WorkerContext, video_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = make_tenant(video_settings)
    fox, cat = (video_entry_id(_miss(context, tenant, prompt)) for prompt in (FOX, CAT))
    hit_id = _hit_job(video_settings, tenant, FOX_ON_MOON, fox, background=cat)
    stitched: list[tuple[Latent, Mask, Latent, Mask]] = []

    def recorded(objects: Latent, object_mask: Mask, backgrounds: Latent, background_mask: Mask) -> Latent:
        stitched.append((objects, object_mask, backgrounds, background_mask))
        return stitch(objects, object_mask, backgrounds, background_mask)

    monkeypatch.setattr(video_generation, "stitch", recorded)
    _run(context, hit_id, run_video_hit)

    [(objects, object_mask, backgrounds, background_mask)] = stitched
    assert objects.shape == backgrounds.shape == (4, FRAMES, 8, 8)
    assert object_mask.shape == background_mask.shape == (FRAMES, 8, 8)
    assert (object_mask | background_mask).any() and not np.array_equal(objects, backgrounds)

    hit = _job(video_settings, hit_id)
    assert hit.status == JobStatus.SUCCEEDED
    assert hit.denoiser_evals == {video_settings.video_model_name: STEPS - K}
    for used in (fox, cat):
        entry, states = _entry(video_settings, used)
        assert entry.access_count == INSERTION_USES + 1 and states[K] == INSERTION_USES + 1
    _, new_states = _entry(video_settings, video_entry_id(hit_id))
    assert sorted(new_states) == [6, 8]


def test_a_redelivered_hit_counts_its_uses_once(context: WorkerContext, video_settings: Settings) -> None:
    tenant = make_tenant(video_settings)
    source = video_entry_id(_miss(context, tenant, FOX))
    hit_id = _hit_job(video_settings, tenant, FOX, source)
    _run(context, hit_id, run_video_hit)
    assert claim_job(context, hit_id) is None  # the broker hands the message out again: nothing to run
    entry, _ = _entry(video_settings, source)
    assert entry.access_count == INSERTION_USES + 1


@pytest.mark.parametrize("unusable", ["state evicted", "entry evicted", "other frames"])
def test_a_hit_whose_source_is_unusable_runs_as_a_miss(
    context: WorkerContext, video_settings: Settings, dispatcher: RecordingDispatcher, unusable: str
) -> None:
    tenant = make_tenant(video_settings)
    source = video_entry_id(_miss(context, tenant, FOX))
    with session_scope(video_settings) as session:
        if unusable == "state evicted":
            evicted = select(CacheState).where(CacheState.entry_id == source, CacheState.k == K)
            session.delete(session.scalars(evicted).one())
        elif unusable == "entry evicted":
            session.execute(update(CacheEntry).where(CacheEntry.id == source).values(state="dirty"))
        else:
            session.execute(update(CacheEntry).where(CacheEntry.id == source).values(frames=2 * FRAMES))
    hit_id = _hit_job(video_settings, tenant, FOX, source)
    dispatcher.clear()
    _run(context, hit_id, run_video_hit)

    job = _job(video_settings, hit_id)
    assert (job.status, job.route, job.k, job.source_entry_id) == (JobStatus.STARTING, "miss", None, None)
    assert (job.background_entry_id, job.video_hit, job.attempts) == (None, None, 0)
    assert [sent.args[0] for sent in dispatcher.of(route_task(Route.MISS, video_settings))] == [str(hit_id)]


def test_a_canceled_video_job_stops_and_ends_canceled(
    context: WorkerContext, video_settings: Settings
) -> None:
    tenant = make_tenant(video_settings)
    job_id = _video_job(video_settings, tenant, FOX, route="miss", admission_outcome="searched_miss")
    job = claim_job(context, job_id)
    assert job is not None
    with session_scope(video_settings) as session:
        session.execute(update(Job).where(Job.id == job_id).values(cancel_requested=True))
    with LeaseKeeper(video_settings, job.id, owner=context.owner) as lease:
        run_video_miss(context, job, lease)
    ended = _job(video_settings, job_id)
    assert ended.status == JobStatus.CANCELED and WEBP not in ended.image_keys
    with session_scope(video_settings) as session:
        assert session.get(CacheEntry, video_entry_id(job_id)) is None


def test_a_lab_video_is_judged_for_its_prompt_and_an_unread_prompt_costs_no_decode(
    video_settings: Settings, dispatcher: RecordingDispatcher
) -> None:
    from lab.models import load_video_judge
    from lab.motion import sample_moving_scene
    from lab.motion_captions import caption
    from workers.runtime.video import LAB_VIDEO_MODEL

    settings = video_settings.model_copy(update={"video_model": LAB_VIDEO_MODEL})
    context = WorkerContext(settings, Role.LARGE, dispatcher=dispatcher)
    tenant = make_tenant(settings)
    prompt = caption(sample_moving_scene(np.random.default_rng(4)), np.random.default_rng(5))

    judged = _job(settings, _miss(context, tenant, prompt, cache_mode="off"))
    unread = _job(settings, _miss(context, tenant, FOX, cache_mode="off"))  # no scene of the lab's world

    assert judged.status == unread.status == JobStatus.SUCCEEDED
    frames = context.video_runtime().frames(_final_latent(context, judged).astype(np.float32))
    assert judged.quality == pytest.approx(load_video_judge(settings).score([frames], [prompt])[0])
    assert judged.vae_decodes == 1 and judged.denoiser_evals == {LAB_VIDEO_MODEL: STEPS}
    assert unread.quality is None and unread.vae_decodes == 0
