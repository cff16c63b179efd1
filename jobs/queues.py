"""Queues and task names, and the route table: the one place that says where each task goes.

A queue's name is written here only: Celery's task routes, the beat schedule and the dispatcher all
read ROUTES. A worker's role decides which queues it consumes (QUEUES_BY_ROLE).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

import redis

from core.vocabulary import Role


class Queue(StrEnum):
    ADMIT = "admit"  # embed, predict, look up, route
    CACHE_MISS = "cache_miss"  # full generations on the large model
    CACHE_HIT = "cache_hit"  # refine/resume for T-k steps (small pool, or large when idle)
    DECODE = "decode"  # VAE decode of stored latents on read
    WEBHOOKS = "webhooks"  # signed deliveries with retries
    MAINTENANCE = "maintenance"  # eviction, predictor retraining, rebalancing, reconciling


class TaskName(StrEnum):
    ADMIT = "reprise.admit"
    GENERATE = "reprise.generate"  # cache_miss
    REUSE = "reprise.reuse"  # cache_hit
    DECODE_IMAGE = "reprise.decode_image"
    DELIVER_WEBHOOK = "reprise.deliver_webhook"
    EVICT = "reprise.evict"
    RETRAIN_PREDICTORS = "reprise.retrain_predictors"
    REBALANCE_POOLS = "reprise.rebalance_pools"
    RECONCILE = "reprise.reconcile"


# The route table: each task paired with the queue it goes on.
ROUTES: Mapping[TaskName, Queue] = MappingProxyType(
    {
        TaskName.ADMIT: Queue.ADMIT,
        TaskName.GENERATE: Queue.CACHE_MISS,
        TaskName.REUSE: Queue.CACHE_HIT,
        TaskName.DECODE_IMAGE: Queue.DECODE,
        TaskName.DELIVER_WEBHOOK: Queue.WEBHOOKS,
        TaskName.EVICT: Queue.MAINTENANCE,
        TaskName.RETRAIN_PREDICTORS: Queue.MAINTENANCE,
        TaskName.REBALANCE_POOLS: Queue.MAINTENANCE,
        TaskName.RECONCILE: Queue.MAINTENANCE,
    }
)

# A large worker takes cache_miss before cache_hit; a small worker takes cache_hit only.
QUEUES_BY_ROLE: dict[Role, tuple[Queue, ...]] = {
    Role.ADMIT: (Queue.ADMIT,),
    Role.LARGE: (Queue.CACHE_MISS, Queue.CACHE_HIT),
    Role.SMALL: (Queue.CACHE_HIT,),
    Role.DECODE: (Queue.DECODE,),
    Role.IO: (Queue.WEBHOOKS, Queue.MAINTENANCE),
}


def queue_depth(client: redis.Redis, queue: Queue) -> int | None:
    """Messages waiting in a queue (Celery's Redis transport keeps each queue as a list named after
    it); None when the broker cannot be asked."""
    try:
        return int(client.llen(queue.value))
    except redis.RedisError:
        return None
