"""SQLAlchemy models: what the service remembers. Postgres is the source of truth.

The embedding columns' dimensions come from settings at migration time
(REPRISE_TEXT_EMBEDDING_DIM, REPRISE_IMAGE_EMBEDDING_DIM); the ORM columns are declared
without a dimension so one model class serves any configured embedder.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    FetchedValue,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from core.vocabulary import DecodeMode, EntryState, JobKind, JobStatus, OnDeadline, Priority
from db.secret_box import EncryptedSecret  # webhook secrets are stored encrypted


class Base(DeclarativeBase):
    pass


def _now() -> Any:
    return func.now()


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    webhook_secret: Mapped[str] = mapped_column(EncryptedSecret)  # whsec_<base64>, Standard Webhooks
    shared_cache: Mapped[bool] = mapped_column(Boolean, default=False)  # opted in to the shared scope
    inflight_limit: Mapped[int] = mapped_column(Integer, default=64)
    # unfinished `high` jobs allowed at once: core.vocabulary.DEFAULT_HIGH_LIMIT, and why
    high_limit: Mapped[int] = mapped_column(Integer, default=8, server_default="8")
    # Unfinished jobs, kept by the jobs_count_inflight trigger (migration 0004): never written here.
    inflight: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())
    # A rotated-out secret, still signed with until previous_webhook_secret_until (the overlap).
    previous_webhook_secret: Mapped[str | None] = mapped_column(EncryptedSecret)
    previous_webhook_secret_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    api_keys: Mapped[list[ApiKey]] = relationship(back_populates="tenant")


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the full key
    prefix: Mapped[str] = mapped_column(String(16))  # shown to operators to tell keys apart
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)  # may read service-wide figures
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    tenant: Mapped[Tenant] = relationship(back_populates="api_keys")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
        CheckConstraint(
            "status IN ('starting','processing','succeeded','failed','canceled')", name="ck_jobs_status"
        ),
        CheckConstraint("route IS NULL OR route IN ('hit','miss','heavy')", name="ck_jobs_route"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.STARTING.value, index=True)

    # the request
    prompt: Mapped[str] = mapped_column(Text)
    negative_prompt: Mapped[str | None] = mapped_column(Text)
    seed: Mapped[int] = mapped_column(BigInteger)
    steps: Mapped[int] = mapped_column(Integer)
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    guidance: Mapped[float] = mapped_column(Float)
    cache_mode: Mapped[str] = mapped_column(String(16), default="auto")
    decode_mode: Mapped[str] = mapped_column(
        String(8), default=DecodeMode.LAZY.value
    )  # core.vocabulary.DecodeMode
    webhook_url: Mapped[str | None] = mapped_column(Text)
    webhook_events_filter: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_fingerprint: Mapped[str | None] = mapped_column(String(64))  # sha256 of the canonical body
    # how soon it runs (core.vocabulary.Priority; jobs.priority), and by when the request wants it
    priority: Mapped[str] = mapped_column(String(8), default=Priority.NORMAL.value, server_default="normal")
    deadline_s: Mapped[float | None] = mapped_column(Float)  # seconds from created_at
    on_deadline: Mapped[str] = mapped_column(
        String(16), default=OnDeadline.BEST_EFFORT.value, server_default="best_effort"
    )

    # a video job: kind 'video', its frames, rate and FreeNoise window
    kind: Mapped[str] = mapped_column(String(8), default=JobKind.IMAGE.value, server_default="image")
    frames: Mapped[int | None] = mapped_column(Integer)
    fps: Mapped[int | None] = mapped_column(Integer)
    noise_window: Mapped[int | None] = mapped_column(Integer)

    # what admission decided
    admission_outcome: Mapped[str | None] = mapped_column(String(16))
    predictor_said_hit: Mapped[bool | None] = mapped_column(Boolean)
    route: Mapped[str | None] = mapped_column(String(8))
    similarity: Mapped[float | None] = mapped_column(Float)
    k: Mapped[int | None] = mapped_column(Integer)
    source_entry_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("cache_entries.id", ondelete="SET NULL")
    )
    admission_ms: Mapped[dict[str, float]] = mapped_column(JSONB, default=dict)  # stage -> ms
    # A decoupled video hit (FlexCache 4.2.2): the background's entry; source_entry_id is the object's.
    background_entry_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("cache_entries.id", ondelete="SET NULL")
    )
    video_hit: Mapped[str | None] = mapped_column(String(16))  # jobs.policies.video_hits.HitKind

    # what ran
    models_used: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    denoiser_evals: Mapped[dict[str, int]] = mapped_column(JSONB, default=dict)  # model -> evaluations
    vae_decodes: Mapped[int] = mapped_column(Integer, default=0)  # VAE decodes the generation ran
    progress_step: Mapped[int | None] = mapped_column(Integer)  # schedule steps done, while it runs
    progress_total: Mapped[int | None] = mapped_column(Integer)  # the schedule's T
    quality: Mapped[float | None] = mapped_column(Float)  # the scorer's: the image's, or a video's
    stages_ms: Mapped[dict[str, float] | None] = mapped_column(JSONB)  # workers.stages: stage -> ms
    # DiffServe's light stage, for a job that went through the cascade (db.cascade.LightStage.as_json)
    cascade: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # Who runs it now, and until when: a redelivered task waits for the lease instead of running twice.
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    final_latent_key: Mapped[str | None] = mapped_column(Text)
    image_keys: Mapped[dict[str, str]] = mapped_column(JSONB, default=dict)  # format -> blob key

    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now(), index=True)
    admitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # DELETE: a tombstone
    outputs_purged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # blobs removed


class CacheEntry(Base):
    __tablename__ = "cache_entries"
    __table_args__ = (CheckConstraint("state IN ('live','dirty')", name="ck_cache_entries_state"),)

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    scope: Mapped[str] = mapped_column(String(64), index=True)  # "tenant:<uuid>" or "shared"
    model_family: Mapped[str] = mapped_column(String(128))
    prompt: Mapped[str] = mapped_column(Text)
    prompt_key: Mapped[str | None] = mapped_column(String(64))  # core.prompt_key: the exact-prompt path
    text_embedding: Mapped[Any | None] = mapped_column(Vector())  # null: cached for image lookups only
    image_embedding: Mapped[Any | None] = mapped_column(Vector())
    final_latent_key: Mapped[str | None] = mapped_column(Text)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)  # final latent (+ image); states count apart
    steps: Mapped[int] = mapped_column(Integer, default=50)  # T of the generation that produced it
    width: Mapped[int] = mapped_column(Integer, default=512)  # size of that generation: latents fit
    height: Mapped[int] = mapped_column(Integer, default=512)  # only runs of the same shape
    source_job_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # A video entry (FlexCache, in a "video:" scope): its frames, its prompt's object and background
    # phrases' embeddings, the base blob its compressed states decode against and its object mask.
    frames: Mapped[int | None] = mapped_column(Integer)
    object_embedding: Mapped[Any | None] = mapped_column(Vector())
    background_embedding: Mapped[Any | None] = mapped_column(Vector())
    base_key: Mapped[str | None] = mapped_column(Text)
    mask_key: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())
    last_access_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())
    access_count: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(8), default=EntryState.LIVE.value)
    # Uniform in [0, 1), fixed at insert: a range of it is a random sample of the scope (db/eviction.py).
    sample_key: Mapped[float] = mapped_column(Float(precision=53), server_default=text("random()"))

    states: Mapped[list[CacheState]] = relationship(
        back_populates="entry", cascade="all, delete-orphan", passive_deletes=True
    )


class CacheState(Base):
    """One stored intermediate latent (entry, k). A missing row is a hole (NIRVANA 5.4)."""

    __tablename__ = "cache_states"
    __table_args__ = (UniqueConstraint("entry_id", "k", name="uq_cache_states_entry_k"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    entry_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("cache_entries.id", ondelete="CASCADE"), index=True
    )
    # The entry's scope, filled on insert by a trigger (migration 0009) for the LRU and LFU indexes.
    scope: Mapped[str | None] = mapped_column(String(64), server_default=FetchedValue())
    # The entry's sample_key, copied on insert by the same trigger (migration 0012): a sample's states
    # lie in the same key range of one index as its entries (db/eviction.py).
    sample_key: Mapped[float | None] = mapped_column(Float(precision=53), server_default=FetchedValue())
    k: Mapped[int] = mapped_column(Integer)
    blob_key: Mapped[str] = mapped_column(Text)
    bytes: Mapped[int] = mapped_column(BigInteger)
    access_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())
    last_access_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())

    entry: Mapped[CacheEntry] = relationship(back_populates="states")


class CacheScopeBytes(Base):
    """A scope's bytes (entries' own plus their states', live or dirty), kept by triggers on the two
    cache tables in the rows' own transactions (migration 0011): the budget check reads one row."""

    __tablename__ = "cache_scope_bytes"

    scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)


class BlobDeletion(Base):
    """Blobs (and every blob under some prefixes) whose rows are gone: written in the transaction that
    deleted them, removed once the blob store has deleted it (db/eviction.py; migration 0011)."""

    __tablename__ = "blob_deletions"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    keys: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    prefixes: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)  # every blob under each
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())


class IntervalStats(Base):
    """Per-interval aggregates for the pool monitor and /v1/stats (MoDM 5.3 reads these)."""

    __tablename__ = "interval_stats"

    period_start: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    period_seconds: Mapped[int] = mapped_column(Integer, primary_key=True)
    arrivals: Mapped[int] = mapped_column(Integer, default=0)
    hits: Mapped[int] = mapped_column(Integer, default=0)
    misses: Mapped[int] = mapped_column(Integer, default=0)
    predicted_misses: Mapped[int] = mapped_column(Integer, default=0)
    k_histogram: Mapped[dict[str, int]] = mapped_column(JSONB, default=dict)  # "k" -> hits
    # role -> {"count": n, "total_ms": t, "steps": s}
    service_time: Mapped[dict[str, dict[str, float]]] = mapped_column(JSONB, default=dict)
    denoiser_evals: Mapped[dict[str, int]] = mapped_column(JSONB, default=dict)  # model -> evaluations
    # VAE decodes (LatentBox 4.1): generations completed and the decodes they ran; image reads answered
    # by the API and the decodes the decode pool ran for reads.
    generations: Mapped[int] = mapped_column(Integer, default=0)
    generation_decodes: Mapped[int] = mapped_column(Integer, default=0)
    image_reads: Mapped[int] = mapped_column(Integer, default=0)
    read_decodes: Mapped[int] = mapped_column(Integer, default=0)


class WebhookDelivery(Base):
    """One attempt of one event, claimed (inserted) before its request is sent, (message_id, attempt)
    unique: until its outcome is recorded its error is db.webhooks.INTERRUPTED (in flight, or its worker
    died mid-attempt: the attempt still counts)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_message_attempt", "message_id", "attempt", unique=True),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    message_id: Mapped[str] = mapped_column(String(64))  # webhook-id, the same for every attempt
    event: Mapped[str] = mapped_column(String(32))
    url: Mapped[str] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())


class WorkerRoleRow(Base):
    """A row of worker_roles: the role (core.vocabulary.Role) a worker hosts now, and the operator's pin."""

    __tablename__ = "worker_roles"

    worker_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)  # manual override: the monitor leaves it
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())


class PoolDecision(Base):
    """One decision of the pool monitor (MoDM 5.3, Algorithm 1): what it read, aimed at and applied.

    inputs: the period's R (per second), H, P(K = k), T, P_large and P_small (requests per second per
    worker), W_miss, W_hit, the pool (workers, pinned per role) and the bounds on N_large.
    heuristic_large: the mode's N_large before the PID (null: no work in the period, the pool held).
    controlled_large, pid_integral, pid_error: the PID's state after this period, which the next
    decision continues from. switches: [{worker, from, to, ok}] sent to workers.
    """

    __tablename__ = "pool_decisions"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now(), index=True)
    mode: Mapped[str] = mapped_column(String(16))
    period_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    period_seconds: Mapped[int] = mapped_column(Integer)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    heuristic_large: Mapped[float | None] = mapped_column(Float)
    controlled_large: Mapped[float] = mapped_column(Float)
    pid_integral: Mapped[float] = mapped_column(Float)
    pid_error: Mapped[float | None] = mapped_column(Float)
    large_before: Mapped[int] = mapped_column(Integer)
    small_before: Mapped[int] = mapped_column(Integer)
    target_large: Mapped[int] = mapped_column(Integer)
    target_small: Mapped[int] = mapped_column(Integer)
    applied_large: Mapped[int] = mapped_column(Integer)
    applied_small: Mapped[int] = mapped_column(Integer)
    switches: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, default=list)


class PredictorFit(Base):
    """A persisted, versioned match-predictor fit (NIRVANA 5.2); admit workers load the newest."""

    __tablename__ = "predictor_fits"

    version: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(64), index=True)
    model_family: Mapped[str] = mapped_column(String(128))
    mode: Mapped[str] = mapped_column(String(8))  # text or image
    entries: Mapped[int] = mapped_column(Integer)  # cache size at fit time (the 5% trigger compares)
    model: Mapped[bytes] = mapped_column(LargeBinary)  # joblib-pickled SGDOneClassSVM + threshold
    fitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())
    true_pos: Mapped[int] = mapped_column(Integer, default=0)
    false_pos: Mapped[int] = mapped_column(Integer, default=0)
    false_neg: Mapped[int] = mapped_column(Integer, default=0)
    true_neg: Mapped[int] = mapped_column(Integer, default=0)


class Discriminator(Base):
    """A trained cascade discriminator (DiffServe 3.2), versioned like the predictor's fits: light
    workers load the newest for their light model and feature kind. report: accuracy, f(t), training."""

    __tablename__ = "discriminators"

    version: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    light_model: Mapped[str] = mapped_column(Text)
    heavy_model: Mapped[str] = mapped_column(Text)
    features: Mapped[str] = mapped_column(String(16))  # workers.runtime.discriminator.FeatureKind
    accuracy: Mapped[float] = mapped_column(Float)  # real vs generated, on held-out images
    report: Mapped[dict[str, Any]] = mapped_column(JSONB)
    model: Mapped[bytes] = mapped_column(LargeBinary)  # the discriminator's own JSON format
    trained_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())


class CascadeDecision(Base):
    """One decision of DiffServe's allocator (3.3): the MILP's inputs, its solution and what was applied.

    inputs: demand (per second), f(t) and its source, per-model latencies, queueing, SLO, the pool.
    solution: jobs.policies.allocation.AllocationPlan.as_json. switches: [{worker, from, to, ok}]."""

    __tablename__ = "cascade_decisions"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now(), index=True)
    period_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    period_seconds: Mapped[int] = mapped_column(Integer)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSONB)
    solution: Mapped[dict[str, Any]] = mapped_column(JSONB)
    threshold: Mapped[float] = mapped_column(Float)
    feasible: Mapped[bool] = mapped_column(Boolean)
    objective: Mapped[float | None] = mapped_column(Float)
    solve_ms: Mapped[float] = mapped_column(Float)
    target_light: Mapped[int] = mapped_column(Integer)
    target_heavy: Mapped[int] = mapped_column(Integer)
    applied_light: Mapped[int] = mapped_column(Integer)
    applied_heavy: Mapped[int] = mapped_column(Integer)
    switches: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, default=list)


class ReadTierDecision(Base):
    """One tuning window of a decode node's dual-format cache (LatentBox 4.3): Eq. 2's inputs, D and
    the split it chose (jobs.policies.tier_tuning.Decision)."""

    __tablename__ = "read_tier_decisions"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now())
    node: Mapped[str] = mapped_column(Text)
    reads: Mapped[int] = mapped_column(Integer)
    alpha_before: Mapped[float] = mapped_column(Float)
    alpha: Mapped[float] = mapped_column(Float)
    promote_after: Mapped[int] = mapped_column(Integer)
    mr_img: Mapped[float] = mapped_column(Float)
    mr_lat: Mapped[float] = mapped_column(Float)
    delta_img: Mapped[float] = mapped_column(Float)
    delta_lat: Mapped[float] = mapped_column(Float)
    t_decode_ms: Mapped[float] = mapped_column(Float)
    t_fetch_ms: Mapped[float] = mapped_column(Float)
    gradient: Mapped[float] = mapped_column(Float)


class QualityAudit(Base):
    """One audited hit (the quality guard): the hit's similarity and k, its score and that of a fresh
    generation of the same request (same prompt, seed and steps, cache off), by the same scorer."""

    __tablename__ = "quality_audits"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    audited_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now(), index=True)
    job_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))  # the hit (no key: it may be purged)
    similarity: Mapped[float] = mapped_column(Float)
    k: Mapped[int] = mapped_column(Integer)
    steps: Mapped[int] = mapped_column(Integer)
    hit_score: Mapped[float] = mapped_column(Float)
    fresh_score: Mapped[float] = mapped_column(Float)
    drop: Mapped[float] = mapped_column(Float)  # fresh_score - hit_score
    scorer: Mapped[str] = mapped_column(Text)


class QualityGuardDecision(Base):
    """One change of the guarded k table: the configured table, the new one, the target and what moved
    it. changes: [{k, old, new, reason, drop_mean, n}]; estimates: [{similarity_lo, similarity_hi, k, n,
    drop_mean}] (jobs.policies.quality_guard)."""

    __tablename__ = "quality_guard_decisions"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=_now(), index=True)
    base_table: Mapped[str] = mapped_column(Text)
    table: Mapped[str] = mapped_column(Text)
    target: Mapped[float] = mapped_column(Float)
    audits: Mapped[int] = mapped_column(Integer)
    changes: Mapped[list[dict[str, Any]]] = mapped_column(JSONB)
    estimates: Mapped[list[dict[str, Any]]] = mapped_column(JSONB)
