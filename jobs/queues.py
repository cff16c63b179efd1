"""Queue and task names: the one place that says where work goes."""

from __future__ import annotations

from enum import StrEnum

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


# A large worker takes cache_miss before cache_hit; a small worker takes cache_hit only.
QUEUES_BY_ROLE: dict[Role, tuple[Queue, ...]] = {
    Role.ADMIT: (Queue.ADMIT,),
    Role.LARGE: (Queue.CACHE_MISS, Queue.CACHE_HIT),
    Role.SMALL: (Queue.CACHE_HIT,),
    Role.DECODE: (Queue.DECODE,),
    Role.IO: (Queue.WEBHOOKS, Queue.MAINTENANCE),
}
