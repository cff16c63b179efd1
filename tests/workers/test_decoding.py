"""The decode role's task bodies against the real database and Redis, on the tiny models: a read is
answered from the node's tiers or decoded, its answer published for the API; a spilled read goes back
to its owner; an image store keeps its first decode; a purge empties the tiers."""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from PIL import Image

from core.settings import Settings
from core.vocabulary import ReadStore, Role
from db.engine import session_scope
from db.models import Job, ReadTierDecision
from jobs.queues import TaskName
from jobs.read_routing import ReadRequest, leave, live_nodes, reply_from_hash, result_key
from tests.support.dispatch import RecordingDispatcher
from tests.support.redis_servers import free_port
from tests.workers.conftest import make_job, make_tenant
from workers.context import WorkerContext
from workers.decoding import (
    decode_node,
    forget_images,
    node_name,
    read_image,
    start_heartbeat,
    stop_heartbeat,
    write_back,
)
from workers.generation import generate_job

pytestmark = pytest.mark.integration


@pytest.fixture
def node_settings(task_settings: Settings) -> Settings:
    return task_settings.model_copy(update={"read_promote_after": 2, "read_window": 3, "read_alpha": 0.5})


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


def _generated(settings: Settings, context_for: Callable[[Role], WorkerContext], **columns: object) -> Job:
    job_id = make_job(settings, make_tenant(settings), "a striped yellow background", route="miss", **columns)
    generate_job(context_for(Role.LARGE), job_id)
    with session_scope(settings) as session:
        return session.get_one(Job, job_id)


def _request(job: Job, fmt: str = "png", *, owner: str = "n1", node: str = "n1") -> ReadRequest:
    return ReadRequest(
        job_id=str(job.id),
        fmt=fmt,
        latent_key=job.final_latent_key,
        image_key=(job.image_keys or {}).get(fmt),
        token=uuid.uuid4().hex,
        owner=owner,
        node=node,
    )


def _node_context(settings: Settings, dispatcher: RecordingDispatcher) -> WorkerContext:
    return WorkerContext(settings, Role.DECODE, dispatcher=dispatcher)


@pytest.mark.parametrize(("fmt", "pil_format"), [("png", "PNG"), ("webp", "WEBP"), ("jpeg", "JPEG")])
def test_a_read_is_decoded_and_its_answer_published(
    node_settings: Settings,
    context_for: Callable[[Role], WorkerContext],
    dispatcher: RecordingDispatcher,
    client: redis.Redis,
    fmt: str,
    pil_format: str,
) -> None:
    job = _generated(node_settings, context_for)
    request = _request(job, fmt)
    reply = read_image(_node_context(node_settings, dispatcher), request.as_json())
    assert (reply.status, reply.tier) == ("ok", "miss")
    published = reply_from_hash(client.hgetall(result_key(request.token)))
    assert published is not None and published.data == reply.data
    image = Image.open(io.BytesIO(published.data))
    assert (image.format, image.size) == (pil_format, (64, 64))
    with session_scope(node_settings) as session:
        assert session.get_one(Job, job.id).image_keys == {}  # LatentBox: the image is only cached


def test_latent_hits_promote_and_each_window_is_recorded(
    node_settings: Settings,
    context_for: Callable[[Role], WorkerContext],
    dispatcher: RecordingDispatcher,
) -> None:
    job = _generated(node_settings, context_for)
    context = _node_context(node_settings, dispatcher)
    tiers = [read_image(context, _request(job).as_json()).tier for _ in range(4)]
    assert tiers == ["miss", "latent", "latent", "image"]  # h = 2 latent hits, then the image tier
    node = decode_node(context)
    assert node.decodes == 3 and node.cache.totals.promotions == 1
    with session_scope(node_settings) as session:
        decisions = session.query(ReadTierDecision).filter(ReadTierDecision.node == node.name).all()
    assert [decision.reads for decision in decisions] == [3]  # W = 3


def test_a_spilled_read_is_written_back_to_its_owner(
    node_settings: Settings,
    context_for: Callable[[Role], WorkerContext],
    dispatcher: RecordingDispatcher,
) -> None:
    job = _generated(node_settings, context_for)
    spill = _node_context(node_settings, dispatcher)
    request = _request(job, owner="owner", node="spill")
    reply = read_image(spill, request.as_json())
    assert (
        reply.spilled and decode_node(spill).cache.tier_of(request.image).value == "miss"
    )  # not cached here
    (sent,) = dispatcher.of(TaskName.WRITE_BACK)
    assert sent.queue == "decode.owner"
    owner = _node_context(node_settings, dispatcher)
    assert write_back(owner, *sent.args)
    owner_node = decode_node(owner)
    assert owner_node.cache.tier_of(request.image).value == "latent" and owner_node.decodes == 0
    assert read_image(owner, _request(job).as_json()).tier == "latent"  # the owner serves it from its tier
    assert not write_back(owner, *sent.args)  # taken once


def test_an_image_store_keeps_its_first_decode_and_a_purge_empties_the_tiers(
    node_settings: Settings,
    context_for: Callable[[Role], WorkerContext],
    dispatcher: RecordingDispatcher,
) -> None:
    settings = node_settings.model_copy(update={"read_store": ReadStore.IMAGES})
    job = _generated(settings, context_for)
    context = _node_context(settings, dispatcher)
    read_image(context, _request(job, "webp").as_json())
    with session_scope(settings) as session:
        key = session.get_one(Job, job.id).image_keys["webp"]
    assert Image.open(io.BytesIO(context.blobs.get(key))).format == "WEBP"
    assert forget_images(context, str(job.id)) == 1
    assert len(decode_node(context).cache.latents) == 0


def test_a_job_without_a_stored_latent_is_gone(
    node_settings: Settings, dispatcher: RecordingDispatcher, client: redis.Redis
) -> None:
    job_id = make_job(node_settings, make_tenant(node_settings), "not generated")
    request = ReadRequest(str(job_id), "png", "jobs/missing/final.latent", None, uuid.uuid4().hex, "n1", "n1")
    reply = read_image(_node_context(node_settings, dispatcher), request.as_json())
    assert reply.status == "gone"
    published = reply_from_hash(client.hgetall(result_key(request.token)))
    assert published is not None and published.status == "gone"


def test_a_node_that_starts_before_redis_answers_joins_the_ring_once_it_does(
    node_settings: Settings, dispatcher: RecordingDispatcher, redis_url: str, client: redis.Redis
) -> None:
    settings = node_settings.model_copy(update={"read_heartbeat_s": 0.2})
    context = _node_context(settings, dispatcher)
    leave(client, node_name())  # as if no test before had put this process's node in the ring
    context.redis = redis.Redis(host="127.0.0.1", port=free_port())  # nothing listens there yet
    stop = threading.Event()
    thread = start_heartbeat(context, stop)  # the first beat fails: logged, not raised
    try:
        assert thread.is_alive() and node_name() not in live_nodes(client, heartbeat_s=60)
        context.redis = redis.Redis.from_url(redis_url)  # the broker answers now
        deadline = time.monotonic() + 10
        while node_name() not in live_nodes(client, heartbeat_s=60) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert node_name() in live_nodes(client, heartbeat_s=60)
    finally:
        stop.set()
        thread.join(timeout=5)
        stop_heartbeat(context)
    assert node_name() not in live_nodes(client, heartbeat_s=60)
