"""Queues and task names, and the route table: the one place that says where each task goes.

A queue's name is written here only: Celery's task routes, the beat schedule and the dispatcher all
read ROUTES. A worker's role decides which queues it consumes (QUEUES_BY_ROLE).

A hit goes only to workers that can serve it (`hit_task`): a refine (MoDM) or a resume whose latent
family the small model shares goes on cache_hit (small pool, and large workers when they serve hits);
a resume the small model cannot run (another latent family) goes on cache_hit_large, which only large
workers consume.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

import redis

from core.vocabulary import HitPolicy, Role

if TYPE_CHECKING:
    from core.settings import Settings


class Queue(StrEnum):
    ADMIT = "admit"  # embed, predict, look up, route
    CACHE_MISS = "cache_miss"  # full generations on the large model
    CACHE_HIT = "cache_hit"  # refine/resume for T-k steps (small pool, or large when idle)
    CACHE_HIT_LARGE = "cache_hit_large"  # resumes only the large model's family can run (large pool)
    CASCADE_LIGHT = "cascade_light"  # DiffServe: a miss on the light model, then the discriminator
    CASCADE_HEAVY = "cascade_heavy"  # DiffServe: the queries the discriminator escalated
    DECODE = "decode"  # reads of stored latents: each decode node consumes its own decode.<node>
    WEBHOOKS = "webhooks"  # signed deliveries with retries
    MAINTENANCE = "maintenance"  # eviction, predictor retraining, rebalancing, reconciling
    QUALITY_AUDIT = "quality_audit"  # a hit generated afresh (the quality guard): large pool, when idle


class TaskName(StrEnum):
    ADMIT = "reprise.admit"
    GENERATE = "reprise.generate"  # cache_miss
    REUSE = "reprise.reuse"  # cache_hit
    REUSE_LARGE = "reprise.reuse_large"  # cache_hit_large: the same body, for the large pool only
    GENERATE_LIGHT = "reprise.generate_light"  # cascade_light
    ESCALATE = "reprise.escalate"  # cascade_heavy
    READ_IMAGE = "reprise.read_image"  # on the owner's (or a spillover node's) decode.<node> queue
    WRITE_BACK = "reprise.write_back"  # a spilled decode's result, to its owner's cache
    FORGET_IMAGES = "reprise.forget_images"  # a deleted or expired job's images, out of a node's cache
    DELIVER_WEBHOOK = "reprise.deliver_webhook"
    EVICT = "reprise.evict"
    RETRAIN_PREDICTORS = "reprise.retrain_predictors"
    REBALANCE_POOLS = "reprise.rebalance_pools"
    RECONCILE = "reprise.reconcile"
    PURGE_OUTPUTS = "reprise.purge_outputs"  # deleted jobs' and expired outputs (the retention pass)
    CHECK_INDEXES = "reprise.check_indexes"  # the cache's HNSW indexes, rebuilt past a bloat ratio
    AUDIT_HIT = "reprise.audit_hit"  # quality_audit
    GUARD_QUALITY = "reprise.guard_quality"  # the quality guard's pass: audits in, the k table moved


# The route table: each task paired with the queue it goes on.
ROUTES: Mapping[TaskName, Queue] = MappingProxyType(
    {
        TaskName.ADMIT: Queue.ADMIT,
        TaskName.GENERATE: Queue.CACHE_MISS,
        TaskName.REUSE: Queue.CACHE_HIT,
        TaskName.REUSE_LARGE: Queue.CACHE_HIT_LARGE,
        TaskName.GENERATE_LIGHT: Queue.CASCADE_LIGHT,
        TaskName.ESCALATE: Queue.CASCADE_HEAVY,
        TaskName.READ_IMAGE: Queue.DECODE,
        TaskName.WRITE_BACK: Queue.DECODE,
        TaskName.FORGET_IMAGES: Queue.DECODE,
        TaskName.DELIVER_WEBHOOK: Queue.WEBHOOKS,
        TaskName.EVICT: Queue.MAINTENANCE,
        TaskName.RETRAIN_PREDICTORS: Queue.MAINTENANCE,
        TaskName.REBALANCE_POOLS: Queue.MAINTENANCE,
        TaskName.RECONCILE: Queue.MAINTENANCE,
        TaskName.PURGE_OUTPUTS: Queue.MAINTENANCE,
        TaskName.CHECK_INDEXES: Queue.MAINTENANCE,
        TaskName.AUDIT_HIT: Queue.QUALITY_AUDIT,
        TaskName.GUARD_QUALITY: Queue.MAINTENANCE,
    }
)

# A large worker takes cache_miss and the cascade's escalations, then the hits only it can serve, then
# cache_hit; a small worker (the cascade's light model) takes cache_hit and the cascade's light stage
# (workers.role_switch.consumed_queues drops a large worker's hits when large_serves_hits is off, and
# adds quality_audit last when the quality guard is on).
QUEUES_BY_ROLE: dict[Role, tuple[Queue, ...]] = {
    Role.ADMIT: (Queue.ADMIT,),
    Role.LARGE: (Queue.CACHE_MISS, Queue.CASCADE_HEAVY, Queue.CACHE_HIT_LARGE, Queue.CACHE_HIT),
    Role.SMALL: (Queue.CACHE_HIT, Queue.CASCADE_LIGHT),
    Role.DECODE: (Queue.DECODE,),
    Role.IO: (Queue.WEBHOOKS, Queue.MAINTENANCE),
}


def hits_need_large(*, hit_policy: HitPolicy, small_family: str, large_family: str) -> bool:
    """Whether only large workers can serve hits: NIRVANA's resume continues a cached intermediate
    latent, which only a model of that latent family can denoise, and under resume admission looks up
    entries of the large family only (workers.admission.lookup_family). A refine (MoDM) starts from a
    final latent that any model can take (decoded and re-encoded when the families differ)."""
    return hit_policy is HitPolicy.RESUME and small_family != large_family


def settings_hits_need_large(settings: Settings) -> bool:
    return hits_need_large(
        hit_policy=settings.hit_policy, small_family=settings.small_family, large_family=settings.large_family
    )


def hit_task(settings: Settings) -> TaskName:
    """The task (and so the queue) a hit runs as: on cache_hit_large when only large workers can
    serve it, on cache_hit otherwise."""
    return TaskName.REUSE_LARGE if settings_hits_need_large(settings) else TaskName.REUSE


def decode_queue(node: str) -> str:
    """The queue of one decode node: its ROUTES entry (Queue.DECODE) is the family, the node's name the
    member (LatentBox 4.4 routes each read to its owner node)."""
    return f"{Queue.DECODE.value}.{node}"


PRIORITY_SEP = "\x06\x16"  # kombu.transport.redis.Channel.sep
PRIORITY_STEPS = (0, 3, 6, 9)  # kombu.transport.redis.PRIORITY_STEPS (jobs.priority maps jobs onto them)


def step_lists(queue: str) -> list[str]:
    """The Redis lists of one queue, a priority step each: the queue's name for step 0, name + sep +
    step above it (kombu's Redis transport)."""
    return [f"{queue}{PRIORITY_SEP}{step}" if step else queue for step in PRIORITY_STEPS]


def queue_depth(client: redis.Redis, queue: Queue) -> int | None:
    """Messages waiting in a queue, over its priority steps' lists (step_lists); None when the broker
    cannot be asked."""
    try:
        pipe = client.pipeline(transaction=False)
        for name in step_lists(queue.value):
            pipe.llen(name)
        return sum(int(length) for length in pipe.execute())
    except redis.RedisError:
        return None
