"""One settings class for the whole service, read from REPRISE_* environment variables.

Every field has a documented default. Policy defaults cite the paper they come from. Invalid
settings fail at start with a message that names the variable and the fix (`load_settings`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from core.admission_settings import AdmitSettings
from core.cascade_settings import CascadeSettings
from core.errors import SettingsError
from core.eviction_settings import EvictionSettings
from core.lookup_settings import LookupSettings
from core.ops_settings import OpsSettings
from core.read_settings import ReadSettings
from core.schedulers import SchedulerName
from core.video_settings import VideoSettings
from core.vocabulary import (
    BUILTIN_FAMILIES,
    CUSTOM_FAMILY,
    BlobBackend,
    EvictionPolicyName,
    HitPolicy,
    LookupMode,
    ModelSet,
    MonitorMode,
    TextEmbedderKind,
)

ENV_PREFIX = "REPRISE_"


def _split_ints(value: Any) -> Any:
    if isinstance(value, str):
        return [int(part) for part in value.replace(" ", "").split(",") if part]
    return value


class Settings(
    VideoSettings, CascadeSettings, ReadSettings, OpsSettings, LookupSettings, EvictionSettings, AdmitSettings
):
    """Configuration of every Reprise process. Environment variables: REPRISE_<FIELD>."""

    model_config = SettingsConfigDict(  # env_ignore_empty: compose passes "" for an unset variable
        env_prefix=ENV_PREFIX, extra="ignore", validate_default=True, env_ignore_empty=True
    )

    # --- where things live -------------------------------------------------------------
    data_dir: Path = Field(
        Path(".reprise"),
        description="Directory for embedded servers' data, tiny models and local blobs.",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL of a Postgres with pgvector (postgresql+psycopg://...). "
        "Unset: `reprise services up` starts an embedded Postgres 18 + pgvector on pg_port.",
    )
    redis_url: str | None = Field(
        None,
        description="Redis URL for the Celery broker. Unset: an embedded redis-server on redis_port.",
    )
    pg_port: int = Field(54329, ge=1024, le=65535, description="Port of the embedded Postgres.")
    redis_port: int = Field(63799, ge=1024, le=65535, description="Port of the embedded Redis.")

    # --- blob store ----------------------------------------------------------------------
    blob_backend: BlobBackend = Field(BlobBackend.LOCAL, description="local directory or s3.")
    blob_dir: Path | None = Field(None, description="Local blob directory. Unset: <data_dir>/blobs.")
    s3_bucket: str | None = Field(None, description="S3 bucket (required when blob_backend=s3).")
    s3_prefix: str = Field("reprise/", description="Key prefix inside the bucket.")
    s3_endpoint_url: str | None = Field(None, description="S3 endpoint for MinIO and the like; unset: AWS.")
    s3_region: str = Field("us-east-1", description="S3 region.")
    s3_access_key_id: str | None = Field(None, description="S3 access key; unset: boto3's default chain.")
    s3_secret_access_key: str | None = Field(None, description="S3 secret key; unset: boto3's chain.")

    # --- models (Hugging Face ids or local paths, loaded with from_pretrained) ----------
    model_set: ModelSet = Field(ModelSet.LAB, description="Built models used for unset models: lab or tiny.")
    large_model: str | None = Field(None, description="Large pipeline: HF id, path, lab:large. Unset: built.")
    small_model: str | None = Field(None, description="Small pipeline for hits. Unset: <model_set>:small.")
    decode_model: str | None = Field(
        None, description="VAE for the decode pool. Unset: the large model's `vae` subfolder."
    )
    large_family: str = Field("", description="Latent family of the large model. Unset: a built model's own.")
    small_family: str = Field("", description="Latent family of the small model. Unset: a built model's own.")
    device: str = Field("auto", description="auto (cuda when present, else cpu), cpu, or cuda[:N].")

    # --- embedders -------------------------------------------------------------------------
    text_embedder: TextEmbedderKind = Field(
        TextEmbedderKind.MINILM_ONNX,
        description="minilm-onnx (all-MiniLM-L6-v2 exported to ONNX Runtime on first use: cosine 1.0 to "
        "minilm, single-prompt p50 23 ms vs 136 ms, `reprise models embedder`), minilm (the same on "
        "torch) or open_clip.",
    )
    open_clip_model: str | None = Field(
        None, description="open_clip model name (e.g. ViT-L-14). Unset: the tiny random open_clip."
    )
    open_clip_pretrained: str | None = Field(None, description="open_clip pretrained tag or checkpoint path.")
    text_embedding_dim: int = Field(
        384, ge=2, le=16000, description="Dimension of the text embedder (all-MiniLM-L6-v2: 384)."
    )
    image_embedding_dim: int = Field(
        64, ge=2, le=16000, description="Dimension of the open_clip embedding (tiny: 64; ViT-L-14: 768)."
    )

    # --- generation ------------------------------------------------------------------------
    steps: int = Field(50, ge=1, le=1000, description="Default T (NIRVANA 6: N = 50 DDIM steps).")
    capture_steps: Annotated[list[int], NoDecode] = Field(
        default_factory=lambda: [5, 10, 15, 20, 25],
        description="Steps K whose latents are cached (NIRVANA 5.3: K = {5,10,15,20,25}). Comma list.",
    )
    default_size: int | None = Field(
        None, ge=8, description="Side of a request that gives none. Unset: 512 (SD 1.5), 64 for built models."
    )
    max_prompt_chars: int = Field(2000, ge=1, description="Longest prompt accepted.")
    max_steps: int = Field(150, ge=1, description="Most denoising steps a request may ask for.")
    max_side: int = Field(1024, ge=8, description="Largest width or height accepted, in pixels.")

    # --- cache policy ---------------------------------------------------------------------
    lookup_mode: LookupMode = Field(LookupMode.TEXT_TO_TEXT, description="text (NIRVANA) or image (MoDM).")
    hit_policy: HitPolicy = Field(HitPolicy.RESUME, description="resume (NIRVANA) or refine (MoDM).")
    k_table: str = Field(
        "auto",
        description="Threshold table: auto (the lookup mode's preset: nirvana-t2t for text, modm-t2i for "
        "image), a preset name, or a custom table 'sim:k,sim:k,...' (jobs/policies/k_selection.py).",
    )
    k_table_profiled_with: str | None = Field(
        None,
        description="The embedder a custom k table was profiled with (e.g. minilm:all-MiniLM-L6-v2 or "
        "open_clip:ViT-L-14); a table profiled with another embedder than the one in use is a warning.",
    )
    scheduler: SchedulerName = Field(
        SchedulerName.DDIM,
        description="Denoising scheduler: ddim (NIRVANA 6), euler, euler-a, dpm++, pndm, lms, or pipeline "
        "(the model's own). Under the resume hit policy only ddim and euler resume exactly.",
    )
    quality_knob: int = Field(
        0, ge=-3, le=3, description="Shifts the chosen k by this many table rows (NIRVANA 5.3.1)."
    )
    eviction_policy: EvictionPolicyName = Field(EvictionPolicyName.LCBFU, description="NIRVANA 5.4 default.")
    cache_budget_bytes: int = Field(
        1 << 30,
        ge=0,
        description="Byte budget per cache scope. NIRVANA 5.4 holds 300k prompts in 1 TB; 1 GiB per "
        "tenant is a starting point to size with `reprise bench simulate --sweep`.",
    )
    predictor_enabled: bool = Field(
        False,
        description="Skip the vector search when the match predictor says miss (NIRVANA 5.2). Off by "
        "default: on the DiffusionDB trace it loses more compute (hits it skips) than it saves in "
        "lookups (README, 'match predictor'; `python -m bench.predictor --trace`).",
    )
    predictor_nu: float | None = Field(
        None, gt=0, le=1, description="SGDOneClassSVM nu. Unset: chosen per fit on held-out data from "
        "0.001 (NIRVANA 6), 0.01, 0.1, 0.5 (jobs.policies.predictor.NU_GRID).",
    )  # fmt: skip
    predictor_audit_rate: float = Field(
        0.1, ge=0, le=1, description="Share of predicted misses searched anyway, to measure the recall."
    )
    predictor_retrain_change: float = Field(
        0.05, gt=0, le=1, description="Retrain when the cache changed by more than this (NIRVANA 5.2: 5%)."
    )
    predictor_retrain_inserts: int = Field(
        64,
        ge=0,
        description="Also retrain after this many inserts since the last fit (an insert burst; 0: off). "
        "Not from the papers: the 5% rule alone leaves a large cache's newest entries unknown to the "
        "predictor for long.",
    )
    cache_all: bool = Field(False, description="Also cache results of hits (MoDM 5.4 caches both models).")

    # --- queues and reliability -------------------------------------------------------------
    task_time_limit_s: int = Field(
        900, ge=10, description="Hard limit of one generation task; the worker kills the child past it."
    )
    visibility_timeout_s: int = Field(
        1800,
        ge=5,
        description="Redis visibility timeout: an unacked task is redelivered after it. Must exceed "
        "task_time_limit_s, or a slow task would run twice.",
    )
    large_serves_hits: bool = Field(
        True,
        description="Large workers also take cache_hit tasks when cache_miss is empty (DESIGN: 'small pool, "
        "or large when idle'). Off: hits run only on the small pool.",
    )
    lease_s: float = Field(
        30.0, ge=2, description="A running GPU task holds its job this long and renews it (issue 12: a dead "
        "run is retried within about lease_s + beat_period_s, not after the task time limit).",
    )  # fmt: skip
    lease_renew_s: float = Field(
        10.0, gt=0, description="How often a running task renews its lease (issue 12: 3 per 30 s lease)."
    )
    max_attempts: int = Field(3, ge=1, le=20, description="Deliveries of a job's task before it fails.")
    stuck_after_s: int = Field(
        120, ge=5, description="The reconciler re-enqueues a queued job untouched for this long."
    )
    beat_period_s: float = Field(30.0, gt=0, description="Period of eviction, retraining and reconciling.")

    # --- pool monitor (MoDM 5.3, Algorithm 1) ------------------------------------------------
    monitor_enabled: bool = Field(
        True, description="Run MoDM 5.3's monitor: it moves GPU workers between the large and small pools."
    )
    monitor_mode: MonitorMode = Field(
        MonitorMode.THROUGHPUT,
        description="throughput (MoDM's default, Appendix Q.9: every hit on the small model) or quality "
        "(MoDM 5.3.1: as many large workers as the request rate allows).",
    )
    monitor_period_s: int = Field(
        60,
        ge=60,
        multiple_of=60,
        description="Seconds between two decisions; the monitor reads the statistics intervals (60 s, "
        "db.stats) of the last period. MoDM 5.3 re-plans once per monitoring period and gives no length.",
    )
    monitor_kp: float = Field(0.6, ge=0, description="PID proportional gain (MoDM 5.3: Kp = 0.6).")
    monitor_ki: float = Field(0.05, ge=0, description="PID integral gain (MoDM 5.3: Ki = 0.05).")
    monitor_kd: float = Field(0.05, ge=0, description="PID derivative gain (MoDM 5.3: Kd = 0.05).")
    monitor_min_large: int = Field(
        1, ge=1, description="Fewest large workers (MoDM Algorithm 1 line 29 keeps at least one)."
    )
    monitor_max_large: int | None = Field(
        None, ge=1, description="Most large workers; unset: no limit (MoDM 5.3 sets none)."
    )
    monitor_min_small: int = Field(
        0, ge=0, description="Fewest small workers (MoDM Algorithm 1 may give every GPU to the large model)."
    )
    monitor_max_small: int | None = Field(
        None, ge=0, description="Most small workers; unset: no limit (MoDM 5.3 sets none)."
    )
    monitor_large_step_ms: float | None = Field(
        None,
        gt=0,
        description="Per-step time of the large model assumed until a large worker has run (MoDM Table 1: "
        "P_large is profiled). Measured service times replace it. Unset: the small model's, if measured.",
    )
    monitor_small_step_ms: float | None = Field(
        None,
        gt=0,
        description="Per-step time of the small model assumed until a small worker has run (MoDM Table 1: "
        "P_small is profiled). Measured service times replace it. Unset: the large model's, if measured.",
    )

    # --- HTTP API ----------------------------------------------------------------------------
    public_base_url: str | None = Field(
        None,
        description="Base URL clients reach the API at (https://api.example.com), used in job URLs and "
        "webhook payloads. Unset: the request's own base URL; webhook payloads then carry relative URLs.",
    )
    max_body_bytes: int = Field(65536, ge=1024, description="Largest request body accepted; larger: 413.")
    auth_cache_s: float = Field(
        5.0,
        ge=0,
        description="An API process trusts a key it looked up this long (issue 12: a query less "
        "per request); a revoked key stops working within it. 0: look up every request.",
    )
    flower_address: str = Field("127.0.0.1", description="Flower's address; off loopback needs basic auth.")
    flower_basic_auth: SecretStr | None = Field(
        None,
        description="user:password for Flower's basic auth (issue 12: Flower never runs without "
        "authentication on a non-loopback address).",
    )
    queue_depth_limit: int = Field(
        1000, ge=1, description="Admit-queue length past which new jobs get 503 + Retry-After (backpressure)."
    )
    retry_after_s: int = Field(
        5, ge=1, le=3600, description="Retry-After seconds sent with 429 (in-flight limit) and 503 responses."
    )

    # --- webhooks (Standard Webhooks) --------------------------------------------------------
    webhook_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts, IPs or CIDRs that webhooks may reach although they are loopback, private or "
        "link-local (e.g. 127.0.0.1,10.0.0.0/8). Comma list. Default: none (SSRF protection).",
    )
    webhook_retry_delays_s: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0],
        description="Seconds to wait before each delivery attempt, the first included; its length is the "
        "attempt limit. Default: the Standard Webhooks (Svix) schedule: immediately, 5 s, 5 min, 30 min, "
        "2 h, 5 h, 10 h, 10 h. Comma list.",
    )
    webhook_timeout_s: float = Field(10.0, gt=0, le=120, description="Timeout of one webhook POST, seconds.")

    @field_validator("webhook_allow_hosts", mode="before")
    @classmethod
    def _parse_allow_hosts(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("webhook_retry_delays_s", mode="before")
    @classmethod
    def _parse_retry_delays(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [float(part) for part in value.replace(" ", "").split(",") if part]
        return value

    @field_validator("webhook_retry_delays_s")
    @classmethod
    def _check_retry_delays(cls, value: list[float]) -> list[float]:
        if not value or any(delay < 0 for delay in value):
            raise ValueError("give at least one delay, none negative, e.g. 0,5,300,1800")
        return value

    @field_validator("public_base_url")
    @classmethod
    def _check_public_base_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, e.g. https://api.example.com")
        return value.rstrip("/") if value is not None else None

    @field_validator("capture_steps", mode="before")
    @classmethod
    def _parse_capture_steps(cls, value: Any) -> Any:
        return _split_ints(value)

    @field_validator("capture_steps")
    @classmethod
    def _check_capture_steps(cls, value: list[int]) -> list[int]:
        if any(k <= 0 for k in value):
            raise ValueError("every capture step must be a positive integer, e.g. 5,10,15,20,25")
        return sorted(set(value))

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgresql+psycopg://")):
            raise ValueError("must be a postgresql+psycopg://user:password@host:port/dbname URL")
        if value is not None and value.startswith("postgresql://"):
            return "postgresql+psycopg://" + value.removeprefix("postgresql://")
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://host:port/db URL")
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        if self.blob_backend is BlobBackend.S3 and not self.s3_bucket:
            raise ValueError("blob_backend=s3 needs REPRISE_S3_BUCKET (the bucket name)")
        if any(k >= self.steps for k in self.capture_steps):
            raise ValueError(
                f"capture_steps {self.capture_steps} must all be below steps={self.steps}: "
                "set REPRISE_CAPTURE_STEPS to steps inside 1..T-1"
            )
        if self.visibility_timeout_s <= self.task_time_limit_s:
            raise ValueError(
                f"visibility_timeout_s={self.visibility_timeout_s} must exceed task_time_limit_s="
                f"{self.task_time_limit_s}: raise REPRISE_VISIBILITY_TIMEOUT_S or lower "
                "REPRISE_TASK_TIME_LIMIT_S"
            )
        if self.lease_renew_s > self.lease_s / 2:
            raise ValueError(
                f"lease_renew_s={self.lease_renew_s} must be at most half of lease_s={self.lease_s}, or one "
                "late renewal loses the lease: lower REPRISE_LEASE_RENEW_S or raise REPRISE_LEASE_S"
            )
        for role in ("large", "small"):
            source = self.model_source(role)
            if source.startswith(("lab:", "tiny:")) and source not in BUILTIN_FAMILIES:
                raise ValueError(
                    f"{role}_model={source!r} is no built model; built: {', '.join(BUILTIN_FAMILIES)}"
                )
            if not getattr(self, f"{role}_family"):
                setattr(self, f"{role}_family", BUILTIN_FAMILIES.get(source, CUSTOM_FAMILY))
        if self.pg_port == self.redis_port:
            raise ValueError("pg_port and redis_port must differ: set REPRISE_PG_PORT or REPRISE_REDIS_PORT")
        for role in ("large", "small"):
            low, high = getattr(self, f"monitor_min_{role}"), getattr(self, f"monitor_max_{role}")
            if high is not None and high < low:
                raise ValueError(
                    f"monitor_max_{role}={high} is below monitor_min_{role}={low}: raise "
                    f"REPRISE_MONITOR_MAX_{role.upper()} or lower REPRISE_MONITOR_MIN_{role.upper()}"
                )
        return self

    # --- derived -------------------------------------------------------------------------
    def model_source(self, role: str) -> str:
        """The large or small model in use: the configured one, or '<model_set>:<role>'."""
        configured: str | None = getattr(self, f"{role}_model")
        return configured if configured is not None else f"{self.model_set}:{role}"

    @property
    def embedded_database(self) -> bool:
        return self.database_url is None

    @property
    def embedded_redis(self) -> bool:
        return self.redis_url is None

    @property
    def sqlalchemy_url(self) -> str:
        """The database URL in use: the configured one, or the embedded server's."""
        embedded = f"postgresql+psycopg://reprise@127.0.0.1:{self.pg_port}/reprise"
        return self.database_url if self.database_url is not None else embedded

    @property
    def broker_url(self) -> str:  # the configured Redis, or the embedded one
        return self.redis_url if self.redis_url is not None else f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def effective_default_size(self) -> int:
        builtin = 64 if self.model_source("large") in BUILTIN_FAMILIES else 512
        return self.default_size if self.default_size is not None else builtin

    @property
    def blob_root(self) -> Path:
        return self.blob_dir if self.blob_dir is not None else self.data_dir / "blobs"

    @property
    def tiny_models_dir(self) -> Path:
        return self.data_dir / "models"


def describe_validation_error(error: ValidationError) -> str:
    """Turn pydantic's error into lines that name the environment variable and the fix."""
    lines = ["Invalid Reprise settings:"]
    for item in error.errors():
        loc = [str(part) for part in item["loc"] if part != "__root__"]
        msg = item["msg"].removeprefix("Value error, ")
        if loc:
            var = ENV_PREFIX + loc[0].upper()
            field = Settings.model_fields.get(loc[0])
            about = f" {var}: {field.description}" if field is not None and field.description else ""
            default = f" Unset it for the default ({field.default!r})." if field is not None else ""
            lines.append(f"  {var}={item.get('input')!r}: {msg}.{about} Fix: set a valid value.{default}")
        else:
            lines.append(f"  {msg}")
    return "\n".join(lines)


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment; raise SettingsError with a readable message."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
