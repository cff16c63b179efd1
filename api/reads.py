"""The API's side of the read path: LatentBox's router (section 4.4), on the event loop.

A read joins the decode already in flight for its image, or starts one: it takes the image's
in-flight marker (SET NX), picks the owner node on the hash ring of live decode nodes, spills to the
least-loaded node when the owner's queue is deeper than theta, and sends the read to that node's
queue. Every reader of the image waits on the image's pub/sub channel, subscribed before it looks, so
a burst of identical reads costs one decode and no thread: nothing polls, nothing blocks the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool

from core.errors import NoDecodeNode
from core.settings import Settings
from jobs.broker import async_broker_client
from jobs.dispatch import Dispatcher
from jobs.policies.hash_ring import HashRing, place
from jobs.queues import decode_queue
from jobs.read_routing import (
    MISSED_BEATS,
    NODES_KEY,
    ReadReply,
    ReadRequest,
    done_channel,
    image_id,
    inflight_key,
    reply_from_hash,
    result_key,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadTarget:
    """What a read needs from the job row: where its latent (or a stored image) is."""

    job_id: uuid.UUID
    fmt: str
    latent_key: str | None
    image_key: str | None


@dataclass(frozen=True, slots=True)
class ReadOutcome:
    reply: ReadReply
    coalesced: bool  # this reader joined a decode another read started


class ImageReader(Protocol):
    """Reads a job's image through the decode nodes. Contract: the outcome, or None when no answer
    came within `wait_s` (the decode goes on; a later read joins it or finds it cached); raises
    NoDecodeNode when no node is alive."""

    async def read(self, target: ReadTarget, *, wait_s: float) -> ReadOutcome | None: ...


READ_POOL_SIZE = 64  # Redis connections per API process; a burst waits for one rather than failing
RECHECK_S = 1.0  # a waiter also looks for its answer this often, should the listener have missed one


class Listener:
    """One pub/sub connection per API process that hears every channel under `prefix` (a finished read,
    a finished job) and wakes the waiters registered for that channel's key.

    A waiter registers before it looks for its answer, so a publication between the two is not lost;
    a thousand waiting requests cost one connection and no thread."""

    def __init__(self, client: aioredis.Redis, prefix: str = done_channel("")) -> None:
        self.client = client
        self.prefix = prefix
        self.waiting: dict[str, set[asyncio.Future[None]]] = {}
        self.ready = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._listen())

    def register(self, image: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(image, set()).add(future)
        return future

    def unregister(self, image: str, future: asyncio.Future[None]) -> None:
        futures = self.waiting.get(image)
        if futures is not None:
            futures.discard(future)
            if not futures:
                del self.waiting[image]

    async def _listen(self) -> None:
        prefix = self.prefix
        while True:
            try:
                async with self.client.pubsub() as pubsub:
                    await pubsub.psubscribe(f"{prefix}*")
                    self.ready.set()
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=RECHECK_S)
                        if message is not None:
                            self._wake(_text(message["channel"]).removeprefix(prefix))
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis went away: waiters fall back on RECHECK_S until it is back
                log.warning("listener on %s* lost Redis; resubscribing", prefix, exc_info=True)
                await asyncio.sleep(RECHECK_S)

    def _wake(self, image: str) -> None:
        for future in self.waiting.pop(image, set()):
            if not future.done():
                future.set_result(None)


class NodeReader:
    """The ImageReader over Redis and the decode nodes' queues."""

    def __init__(self, settings: Settings, dispatcher: Dispatcher) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        # Per event loop: a connection pool, the listener and the placement lock belong to one loop.
        self._loops: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[aioredis.Redis, Listener, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    def _for_loop(self) -> tuple[aioredis.Redis, Listener, asyncio.Lock]:
        loop = asyncio.get_running_loop()
        found = self._loops.get(loop)
        if found is None:
            client = async_broker_client(
                self.settings, max_connections=READ_POOL_SIZE, wait_s=self.settings.decode_wait_s
            )
            # Placement reads the queues, then sends, one read at a time, so that a burst of reads sees
            # the queue each earlier read made (LatentBox's router is one event loop too, section 5).
            found = (client, Listener(client), asyncio.Lock())
            self._loops[loop] = found
        return found

    async def read(self, target: ReadTarget, *, wait_s: float) -> ReadOutcome | None:
        try:
            return await self._read(target, wait_s=wait_s)
        except (RedisError, TimeoutError) as error:
            raise NoDecodeNode(f"the read path's Redis cannot be reached: {error}") from error

    async def _read(self, target: ReadTarget, *, wait_s: float) -> ReadOutcome | None:
        client, listener, lock = self._for_loop()
        image = image_id(target.job_id, target.fmt)
        deadline = asyncio.get_running_loop().time() + wait_s
        await asyncio.wait_for(listener.ready.wait(), timeout=wait_s)
        while True:
            woken = listener.register(image)
            token = uuid.uuid4().hex
            if await client.set(inflight_key(image), token, nx=True, ex=max(1, math.ceil(wait_s))):
                try:
                    async with lock:
                        await self._place_and_send(client, target, token)
                except BaseException:
                    listener.unregister(image, woken)
                    await client.delete(inflight_key(image))
                    raise
                coalesced = False
            else:
                current = await client.get(inflight_key(image))
                if current is None:  # that decode just finished: start or join the next one
                    listener.unregister(image, woken)
                    continue
                token, coalesced = _text(current), True
            reply = await _answer(client, listener, image, woken, token, deadline)
            return ReadOutcome(reply, coalesced) if reply is not None else None

    async def _place_and_send(self, client: aioredis.Redis, target: ReadTarget, token: str) -> None:
        """Send the read to its owner, or to the least-loaded node when the owner is too busy."""
        alive = await client.zrangebyscore(
            NODES_KEY, time.time() - self.settings.read_heartbeat_s * MISSED_BEATS, "+inf"
        )
        nodes = sorted(_text(name) for name in alive)
        if not nodes:
            raise NoDecodeNode("no decode node is alive")
        image = image_id(target.job_id, target.fmt)
        owner = HashRing(nodes).owner(image)
        async with client.pipeline(transaction=False) as pipe:
            for node in nodes:
                pipe.llen(decode_queue(node))
            depths = dict(zip(nodes, [int(depth) for depth in await pipe.execute()], strict=True))
        placement = place(owner, depths, theta=self.settings.read_spill_theta)
        request = ReadRequest(
            job_id=str(target.job_id),
            fmt=target.fmt,
            latent_key=target.latent_key,
            image_key=target.image_key,
            token=token,
            owner=placement.owner,
            node=placement.node,
        )
        await run_in_threadpool(self.dispatcher.read_image, placement.node, request.as_json())


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _answer(
    client: aioredis.Redis,
    listener: Listener,
    image: str,
    woken: asyncio.Future[None],
    token: str,
    deadline: float,
) -> ReadReply | None:
    """The answer stored under `token`: at once if it is there, else once a decode of the image is
    announced (ours, or an earlier one: then look again), within the deadline."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            reply = reply_from_hash(await client.hgetall(result_key(token)))
            if reply is not None:
                return reply
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                await asyncio.wait_for(asyncio.shield(woken), timeout=min(remaining, RECHECK_S))
            except TimeoutError:
                continue
            woken = listener.register(image)
    finally:
        listener.unregister(image, woken)
