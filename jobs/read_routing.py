"""The read path's shared state in Redis (LatentBox 4.4): which decode nodes are alive, how deep their
queues are, the in-flight map that coalesces identical reads, and how a node hands its answer back.

    reprise:decode:nodes            sorted set: node -> unix time of its last heartbeat
    reprise:decode:node:<node>      the node's last snapshot (JSON: tiers, alpha, counters)
    decode.<node>                   the node's own Celery queue (jobs.queues.decode_queue)
    reprise:read:inflight:<image>   the token of the decode in flight for an image (SET NX, with a TTL)
    reprise:read:result:<token>     that decode's answer (a hash, kept briefly for late waiters)
    reprise:read:done:<image>       pub/sub channel: the token, once its answer is stored

An image is one job's output in one format ("<job id>.<format>"). Waiters subscribe to the image's
channel before they look for an answer, so a publication is never missed; no one polls Postgres.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis
from redis.typing import EncodableT, FieldT

from db.images import ImageFormat
from jobs.dispatch import Dispatcher
from jobs.queues import decode_queue

NODES_KEY = "reprise:decode:nodes"
MISSED_BEATS = 3  # a node that missed three heartbeats is out of the ring
RESULT_TTL_S = 30  # an answer outlives its publication by this much, for waiters that subscribed late
FORMATS = tuple(fmt.value for fmt in ImageFormat)  # an image id is a job and one of these

# Delete the in-flight marker only if it is still this decode's (a later decode may own it by now).
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def image_id(job_id: uuid.UUID | str, fmt: str) -> str:
    return f"{job_id}.{fmt}"


def node_key(node: str) -> str:
    return f"reprise:decode:node:{node}"


def inflight_key(image: str) -> str:
    return f"reprise:read:inflight:{image}"


def result_key(token: str) -> str:
    return f"reprise:read:result:{token}"


def done_channel(image: str) -> str:
    return f"reprise:read:done:{image}"


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """One decode asked of a node: the image, where its bytes are stored, and who answers whom.

    `image_key`: a stored image of this format (an eager job's PNG, an image store's); read instead of
    decoding. `owner`: the node whose cache the image belongs to, when `node` is a spillover node."""

    job_id: str
    fmt: str
    latent_key: str | None
    image_key: str | None
    token: str
    owner: str
    node: str

    @property
    def image(self) -> str:
        return image_id(self.job_id, self.fmt)

    @property
    def spilled(self) -> bool:
        return self.node != self.owner

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> ReadRequest:
        values: dict[str, Any] = {name: payload.get(name) for name in cls.__dataclass_fields__}
        return cls(**values)


@dataclass(frozen=True, slots=True)
class ReadReply:
    """A node's answer. status: ok, gone (no stored latent or image any more) or error."""

    status: str
    tier: str = ""
    node: str = ""
    spilled: bool = False
    data: bytes = b""
    message: str = ""


# --- membership -----------------------------------------------------------------------------------


def heartbeat(client: redis.Redis, node: str, snapshot: Mapping[str, Any], *, ttl_s: float) -> None:
    """Say `node` is alive now, with its figures (kept a little longer than it counts as alive)."""
    pipe = client.pipeline()
    pipe.zadd(NODES_KEY, {node: time.time()})
    pipe.set(node_key(node), json.dumps(snapshot), ex=max(1, int(ttl_s * MISSED_BEATS * 10)))
    pipe.execute()


def leave(client: redis.Redis, node: str) -> None:
    client.zrem(NODES_KEY, node)


def live_nodes(client: redis.Redis, *, heartbeat_s: float) -> list[str]:
    """Nodes that beat within the last MISSED_BEATS heartbeats, by name."""
    since = time.time() - heartbeat_s * MISSED_BEATS
    names = client.zrangebyscore(NODES_KEY, since, "+inf")
    return sorted(name.decode() if isinstance(name, bytes) else str(name) for name in names)


def node_snapshots(client: redis.Redis, nodes: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each live node's last snapshot ({} for one that has not written one)."""
    if not nodes:
        return {}
    raw = client.mget([node_key(node) for node in nodes])
    return {node: json.loads(value) if value else {} for node, value in zip(nodes, raw, strict=True)}


def queue_depths(client: redis.Redis, nodes: Sequence[str]) -> dict[str, int]:
    """Decodes waiting on each node's queue (LLEN; the one it is running is not counted)."""
    pipe = client.pipeline()
    for node in nodes:
        pipe.llen(decode_queue(node))
    return {node: int(depth) for node, depth in zip(nodes, pipe.execute(), strict=True)}


# --- answers --------------------------------------------------------------------------------------


def publish_reply(client: redis.Redis, request: ReadRequest, reply: ReadReply) -> None:
    """Store the answer under the request's token, free the image's in-flight marker, wake the waiters."""
    key = result_key(request.token)
    fields: dict[FieldT, EncodableT] = {
        "status": reply.status,
        "tier": reply.tier,
        "node": reply.node,
        "spilled": int(reply.spilled),
        "data": reply.data,
        "message": reply.message,
    }
    pipe = client.pipeline()
    pipe.hset(key, mapping=fields)
    pipe.expire(key, RESULT_TTL_S)
    pipe.eval(_RELEASE, 1, inflight_key(request.image), request.token)
    pipe.publish(done_channel(request.image), request.token)
    pipe.execute()


def reply_from_hash(raw: Mapping[Any, Any]) -> ReadReply | None:
    """The answer read back from its hash (bytes keys and values); None when there is none yet."""
    if not raw:
        return None
    text = {key.decode(): value for key, value in raw.items()}
    return ReadReply(
        status=text["status"].decode(),
        tier=text.get("tier", b"").decode(),
        node=text.get("node", b"").decode(),
        spilled=text.get("spilled", b"0") == b"1",
        data=text.get("data", b""),
        message=text.get("message", b"").decode(),
    )


def forget_everywhere(
    client: redis.Redis, dispatcher: Dispatcher, job_id: uuid.UUID, *, heartbeat_s: float
) -> int:
    """Ask every live decode node to drop the job's images (a purge); how many were asked. Best effort:
    a node that misses it only holds bytes no read can reach (reads check the job first)."""
    nodes = live_nodes(client, heartbeat_s=heartbeat_s)
    for node in nodes:
        dispatcher.forget_images(node, job_id)
    return len(nodes)
