"""The decode role's task bodies: one process is one decode node (LatentBox 4), with its cache in memory.

The node's name is its Celery worker's (REPRISE_DECODE_NODE, set by workers.bootstrap); it consumes
decode.<node>. A read's answer goes to Redis and wakes its waiters (jobs.read_routing.publish_reply);
a spilled read's latent and image are parked in Redis for the owner, which takes them in `write_back`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import redis

from core.errors import BlobNotFound, LatentError
from db import stats
from db.blobs import keys
from db.codec.latent import decode_latent
from db.engine import session_scope
from db.images import record_image_key
from db.reads import record_tier_decision
from jobs.policies.tier_tuning import Decision
from jobs.read_routing import ReadReply, ReadRequest, heartbeat, leave, publish_reply
from workers import metrics
from workers.context import WorkerContext
from workers.decode_node import DecodeNode, NodeSetup, WriteBack
from workers.kinds import kind_of_output

log = logging.getLogger(__name__)

NODE_ENV = "REPRISE_DECODE_NODE"
WRITE_BACK_TTL_S = 600  # a parked write-back waits this long for its owner


def node_name() -> str:
    return os.environ.get(NODE_ENV) or f"decode-{os.getpid()}"


def decision_row(decision: Decision) -> dict[str, float]:
    measured = decision.gradient
    return {
        "reads": decision.reads,
        "alpha_before": decision.alpha_before,
        "alpha": decision.alpha,
        "promote_after": decision.promote_after,
        "mr_img": measured.mr_img,
        "mr_lat": measured.mr_lat,
        "delta_img": measured.delta_img,
        "delta_lat": measured.delta_lat,
        "t_decode_ms": measured.t_decode_s * 1e3,
        "t_fetch_ms": measured.t_fetch_s * 1e3,
        "gradient": measured.d,
    }


def decode_node(context: WorkerContext) -> DecodeNode:
    """This process's node, built on first use with the settings' set-up."""
    if context.decode_node is None:
        context.decode_node = build_node(context, node_name())
    node: DecodeNode = context.decode_node
    return node


def build_node(context: WorkerContext, name: str) -> DecodeNode:
    settings = context.settings

    def decode(latent_bytes: bytes, fmt: str) -> bytes:
        with metrics.timed(metrics.CODEC_SECONDS, operation="decode"):
            latent = decode_latent(latent_bytes)
        data = kind_of_output(fmt).decode(context, latent, fmt)  # an image, or a video's animated WebP
        with session_scope(settings) as session:
            stats.record_decodes(session, read_decodes=1)
        return data

    def keep_image(request: ReadRequest, image: bytes) -> None:
        key = keys.image_key(request.job_id, request.fmt)
        context.blobs.put(key, image)
        with session_scope(settings) as session:
            record_image_key(session, uuid.UUID(request.job_id), request.fmt, key)

    def on_decision(node: str, decision: Decision) -> None:
        with session_scope(settings) as session:
            record_tier_decision(session, node, decision_row(decision))
        log.info(
            "decode node %s: alpha %.3f -> %.3f (D=%.3g)",
            node,
            decision.alpha_before,
            decision.alpha,
            decision.gradient.d,
        )

    return DecodeNode(
        name,
        NodeSetup.from_settings(settings),
        blobs=context.blobs,
        decode=decode,
        keep_image=keep_image,
        on_decision=on_decision,
    )


def read_image(context: WorkerContext, payload: Mapping[str, Any]) -> ReadReply:
    """Serve one read and publish the answer; a spilled one also sends the owner its write-back."""
    request = ReadRequest.from_json(payload)
    node = decode_node(context)
    back: WriteBack | None = None
    try:
        reply, back = node.serve(request)
    except BlobNotFound as gone:
        reply = ReadReply("gone", node=node.name, message=str(gone))
    except (LatentError, OSError, ValueError) as error:
        log.exception("decode node %s could not serve %s", node.name, request.image)
        reply = ReadReply("error", node=node.name, message=f"{type(error).__name__}: {error}")
    publish_reply(context.broker(), request, reply)
    if back is not None:
        send_write_back(context, request, back)
    return reply


def send_write_back(context: WorkerContext, request: ReadRequest, back: WriteBack) -> None:
    """Park the latent and image in Redis and queue their key on the owner (LatentBox 4.4, step 4)."""
    key = f"reprise:read:writeback:{request.token}"
    client = context.broker()
    pipe = client.pipeline()
    pipe.hset(
        key,
        mapping={
            "image": back.image,
            "latent": back.latent or b"",
            "has_latent": int(back.latent is not None),
        },
    )
    pipe.expire(key, WRITE_BACK_TTL_S)
    pipe.execute()
    context.dispatcher.write_back(request.owner, request.as_json(), key)


def write_back(context: WorkerContext, payload: Mapping[str, Any], payload_key: str) -> bool:
    """Take a spilled read's result into this (the owner's) cache; False when it expired unclaimed."""
    client = context.broker()
    raw: dict[bytes, bytes] = client.hgetall(payload_key)  # type: ignore[assignment]
    client.delete(payload_key)
    if not raw:
        return False
    back = WriteBack(latent=raw[b"latent"] if raw.get(b"has_latent") == b"1" else None, image=raw[b"image"])
    decode_node(context).write_back(ReadRequest.from_json(payload), back)
    return True


def forget_images(context: WorkerContext, job_id: str) -> int:
    return decode_node(context).forget(job_id)


def beat(context: WorkerContext) -> None:
    node = decode_node(context)
    heartbeat(context.broker(), node.name, node.snapshot(), ttl_s=context.settings.read_heartbeat_s)


def start_heartbeat(context: WorkerContext, stop: threading.Event | None = None) -> threading.Thread:
    """Keep this node in the ring: a heartbeat with its figures every REPRISE_READ_HEARTBEAT_S, until
    `stop` is set (never, by default: the process's life). A broker out of reach (at start too: a node
    may boot before Redis) only delays the node's entry to the ring; it joins at the first heartbeat
    that reaches it."""
    stop = stop or threading.Event()

    def beat_once() -> None:
        try:
            beat(context)
        except redis.RedisError as error:
            wait_s = context.settings.read_heartbeat_s
            log.warning("decode node %s: heartbeat failed, next in %.0f s: %s", node_name(), wait_s, error)

    def run() -> None:
        while not stop.wait(context.settings.read_heartbeat_s):
            beat_once()

    beat_once()
    thread = threading.Thread(target=run, name="decode-heartbeat", daemon=True)
    thread.start()
    return thread


def stop_heartbeat(context: WorkerContext) -> None:
    with contextlib.suppress(redis.RedisError):
        leave(context.broker(), node_name())
