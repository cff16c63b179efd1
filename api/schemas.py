"""Request and response bodies. The job object itself (Generation) is jobs.representation's, shared
with the webhooks; it is re-exported here so the API's schemas sit in one place."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.openai_errors import is_openai_path
from core.params import MAX_FPS, MAX_FRAMES
from core.vocabulary import EventFilter
from jobs.representation import Generation

__all__ = ["Generation", "GenerationCreate", "GenerationList", "ProblemDetails", "Stats"]

CacheMode = Literal["auto", "off", "shared"]
DecodeMode = Literal["lazy", "eager"]
KindName = Literal["image", "video"]
VIDEO_FIELDS = ("frames", "fps", "noise_window")  # only with kind "video"
DEFAULT_FRAMES = 16  # 2 seconds at DEFAULT_FPS: a short clip by default; FlexCache's 64 frames on request
DEFAULT_FPS = 8
EventFilterName = Literal["start", "completed"]
PriorityName = Literal["low", "normal", "high"]  # core.vocabulary.Priority
OnDeadlineName = Literal["fail", "best_effort"]  # core.vocabulary.OnDeadline
MAX_DEADLINE_S = 24 * 3600  # a day: past it a deadline orders nothing a queue holds
SCHEDULING_DEFAULTS = {"priority": "normal", "deadline_s": None, "on_deadline": "best_effort"}


def _no_nul(value: str | None) -> str | None:
    # Postgres text cannot hold NUL: refuse it here rather than fail at insert time.
    if value is not None and "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


class GenerationCreate(BaseModel):
    """A text-to-image request, or with kind "video" a text-to-video one (FlexCache). Sizes and steps are
    checked against the server's limits."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "prompt": "a lighthouse on a cliff at dusk, oil painting",
                    "steps": 50,
                    "width": 512,
                    "height": 512,
                    "webhook": "https://example.com/hooks/reprise",
                    "webhook_events_filter": ["completed"],
                },
                {"prompt": "a red kite over a beach", "kind": "video", "frames": 16, "fps": 8},
            ]
        },
    )

    # Bounds that hold on every server are in the schema; the configured maxima are checked per request.
    prompt: str = Field(
        min_length=1, description="What to draw. Not blank; at most REPRISE_MAX_PROMPT_CHARS characters."
    )
    negative_prompt: str | None = Field(None, description="What to steer away from.")
    seed: int | None = Field(None, ge=0, lt=2**63, description="Random seed; random when omitted.")
    steps: int | None = Field(
        None, description="Denoising steps T, 1..REPRISE_MAX_STEPS. Default REPRISE_STEPS."
    )
    width: int | None = Field(
        None, description="Pixels, a multiple of 8, at most REPRISE_MAX_SIDE. Default REPRISE_DEFAULT_SIZE."
    )
    height: int | None = Field(
        None, description="Pixels, a multiple of 8, at most REPRISE_MAX_SIDE. Default REPRISE_DEFAULT_SIZE."
    )
    guidance: float = Field(7.5, allow_inf_nan=False, description="Classifier-free guidance scale, 0..50.")
    cache: CacheMode = Field(
        "auto",
        description="auto: reuse this tenant's earlier work; off: generate from scratch and cache nothing; "
        "shared: also reuse the shared scope (the tenant must have opted in).",
    )
    decode: DecodeMode = Field(
        "lazy",
        description="lazy: store only the latent; the first read of the image decodes it (LatentBox). "
        "eager: decode at completion and store the PNG, so the first read of the PNG is served at once.",
    )
    kind: KindName = Field(
        "image",
        description="image: one picture (GET .../image); video: an animated WebP of `frames` frames "
        "(GET .../video). Width and height default to REPRISE_DEFAULT_SIZE for both.",
    )
    frames: int | None = Field(
        None,
        ge=1,
        le=MAX_FRAMES,
        description=f"Video only: frames, 1..{MAX_FRAMES}. Default {DEFAULT_FRAMES}.",
    )
    fps: int | None = Field(
        None,
        ge=1,
        le=MAX_FPS,
        description=f"Video only: frames per second, 1..{MAX_FPS}. Default {DEFAULT_FPS}.",
    )
    noise_window: int | None = Field(
        None,
        ge=1,
        description="Video only: FreeNoise's window in frames, 1..frames (noise repeats, shuffled, every "
        "window, for longer consistent clips). Default: independent noise per frame.",
    )
    webhook: str | None = Field(
        None,
        max_length=2048,
        description="URL to POST signed events to (Standard Webhooks). Loopback, private and link-local "
        "hosts are refused.",
    )
    webhook_events_filter: list[EventFilterName] | None = Field(
        None,
        min_length=1,
        description="Events to send: start, completed (succeeded, failed or canceled). Default: both.",
    )
    priority: PriorityName = Field(
        "normal",
        description="How soon it runs against other waiting jobs: high first, low last (the broker's "
        "priority steps). A tenant's unfinished high jobs are capped "
        "(429 high-priority-limit past it).",
    )
    deadline_s: float | None = Field(
        None,
        gt=0,
        le=MAX_DEADLINE_S,
        allow_inf_nan=False,
        description="Seconds from submission by which it should have ended (see on_deadline).",
    )
    on_deadline: OnDeadlineName = Field(
        "best_effort",
        description="fail: refuse the request at once (422 deadline-unmet) when its estimated finish is "
        "past deadline_s; best_effort: run it anyway.",
    )

    @field_validator("prompt", "negative_prompt", "webhook")
    @classmethod
    def _check_text(cls, value: str | None) -> str | None:
        return _no_nul(value)

    def events(self) -> list[str]:
        chosen = self.webhook_events_filter or [event.value for event in EventFilter]
        return sorted(set(chosen))

    def fingerprint(self) -> str:
        """sha256 of the request as understood (defaults filled in), to compare Idempotency-Key replays."""
        # Defaults of fields added later are left out, so a body sent before they existed keeps its
        # fingerprint: decode lazy, and kind image (whose video fields are unset: anything else is a 422).
        left_out = {"decode"} if self.decode == "lazy" else set()
        if self.kind == "image":
            left_out |= {"kind", *VIDEO_FIELDS}
        left_out |= {name for name, default in SCHEDULING_DEFAULTS.items() if getattr(self, name) == default}
        body = self.model_dump(mode="json", exclude=left_out)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


class GenerationList(BaseModel):
    results: list[Generation]
    next: str | None = Field(description="URL of the next page (older jobs); null on the last page.")


class ProblemDetails(BaseModel):
    """RFC 9457 problem details: the body of every error response."""

    type: str = Field(description="urn:reprise:problem:<kind>, or about:blank for plain HTTP errors.")
    title: str
    status: int
    detail: str
    instance: str = Field(description="The request path.")
    errors: list[dict[str, str]] | None = Field(
        None, description="For invalid input: {location: body|query|header|path, field, detail} per field."
    )


class CacheStats(BaseModel):
    hits: int
    misses: int
    hit_rate: float | None = Field(description="hits / (hits + misses); null before any admission.")
    k_histogram: dict[str, int] = Field(description="Hits per k (steps skipped).")


class ComputeStats(BaseModel):
    steps_requested: int = Field(
        description="Σ T over admitted jobs: the all-large-model baseline, in steps."
    )
    steps_skipped: int = Field(description="Σ k over hits: steps the cache saved.")
    saved_fraction: float | None = Field(description="steps_skipped / steps_requested.")
    denoiser_evaluations: dict[str, int] = Field(description="Evaluations actually run, per model.")


class QualityStats(BaseModel):
    """The scores of the window's scored jobs (metrics.quality: the lab judge's on the lab's models,
    CLIP score on real ones with real CLIP weights; one deployment uses one scorer)."""

    judged: int = Field(description="Jobs with a score.")
    hit_mean: float | None = Field(description="Mean score of scored hits (judge: 0..1, attributes shown).")
    miss_mean: float | None = Field(description="Mean score of scored misses.")


class GuardBin(BaseModel):
    """The quality guard's drop estimate of one (similarity bin, k): the mean of its newest audits."""

    similarity_lo: float
    similarity_hi: float
    k: int = Field(description="Steps the audited hits skipped.")
    n: int = Field(description="Audits the estimate rests on.")
    drop_mean: float = Field(description="Mean of fresh score - hit score.")


class GuardChange(BaseModel):
    """The quality guard's latest change of the k table (a row of quality_guard_decisions)."""

    decided_at: datetime
    table: str = Field(description="The table it set, e.g. '>0.95:25,>0.9:20'.")
    audits: int = Field(description="Audits the estimates it acted on rest on.")
    changes: list[dict[str, Any]] = Field(description="[{k, old, new, reason, drop_mean, n}] per moved row.")


class QualityGuardView(BaseModel):
    """The quality guard (jobs/policies/quality_guard.py): its target, its estimate and the table in use."""

    enabled: bool = Field(description="REPRISE_QUALITY_GUARD; off, the configured table is used as is.")
    target: float = Field(description="REPRISE_QUALITY_DROP_TARGET: the mean drop it holds per bin.")
    audit_fraction: float = Field(description="REPRISE_QUALITY_AUDIT_FRACTION: share of hits audited.")
    scorer: str | None = Field(description="The scorer of the newest audit (lab-judge, clip-score).")
    audits: int = Field(description="Hits audited, ever.")
    drop_mean: float | None = Field(description="Mean drop of the audits the estimate keeps, every bin.")
    configured_table: str = Field(description="REPRISE_K_TABLE, read for the lookup mode.")
    table: str = Field(description="The table admission serves from: the guard's newest, or the configured.")
    bins: list[GuardBin] = Field(description="The estimate per (similarity bin, k).")
    last_change: GuardChange | None = Field(description="The newest change; null before the first.")


class DecodeStats(BaseModel):
    """VAE decodes (LatentBox 4.1), over the statistics intervals that overlap the window."""

    generations: int = Field(description="Generations completed (misses and hits).")
    generation_decodes: int = Field(description="VAE decodes those generations ran.")
    per_job: float | None = Field(
        description="generation_decodes / generations; 0 when only latents are stored."
    )
    image_reads: int = Field(description="Image downloads answered (GET /v1/generations/{id}/image).")
    read_decodes: int = Field(description="Decodes the decode pool ran for reads.")
    per_read: float | None = Field(description="read_decodes / image_reads.")


class IntervalRow(BaseModel):
    period_start: datetime
    period_seconds: int
    arrivals: int
    hits: int
    misses: int
    predicted_misses: int


class PoolDecisionView(BaseModel):
    """The pool monitor's latest decision (MoDM 5.3, Algorithm 1)."""

    decided_at: datetime
    mode: str = Field(description="quality or throughput (MoDM 5.3.1, 5.3.2).")
    period_start: datetime
    period_seconds: int
    request_rate: float | None = Field(description="R, arrivals per second in the period read.")
    hit_rate: float | None = Field(description="H_cache in the period read.")
    heuristic_large: float | None = Field(description="Algorithm 1's N_large before the PID; null: held.")
    controlled_large: float = Field(description="The PID's continuous number of large workers.")
    before: dict[str, int] = Field(description="Workers per pool before the decision.")
    target: dict[str, int] = Field(description="Workers per pool the decision aims at.")
    applied: dict[str, int] = Field(description="Workers per pool after the moves the workers accepted.")
    inputs: dict[str, Any] = Field(description="Everything the decision read: R, H, P(K=k), T, P_large, ...")
    switches: list[dict[str, Any]] = Field(description="Moves sent: {worker, from, to, ok}.")


class CascadeDecisionView(BaseModel):
    """DiffServe's allocator's latest decision (3.3): the MILP's inputs, solution and what was applied."""

    decided_at: datetime
    period_start: datetime
    period_seconds: int
    threshold: float = Field(description="The confidence threshold chosen (the objective, maximised).")
    feasible: bool = Field(description="False: demand or SLO could not be met; the stated fallback ran.")
    objective: float | None
    solve_ms: float = Field(description="Time HiGHS took (scipy.optimize.milp).")
    target: dict[str, int] = Field(
        description="Workers per cascade model (light, heavy) the solution aims at."
    )
    applied: dict[str, int] = Field(description="Workers per model after the moves the workers accepted.")
    inputs: dict[str, Any] = Field(
        description="Demand (EWMA), latencies, Little's-law waits, SLO, f(t), pool."
    )
    solution: dict[str, Any] = Field(
        description="The plan: threshold, workers, batches, f(t), headroom, fallback."
    )
    switches: list[dict[str, Any]] = Field(description="Moves sent: {worker, from, to, ok}.")


class CascadeView(BaseModel):
    """DiffServe's cascade (REPRISE_ALLOCATOR=diffserve): its threshold now, the window's light stages,
    the discriminator and the allocator's latest decision."""

    allocator: str = Field(description="modm or diffserve: which controller owns the pools.")
    threshold: float = Field(description="The threshold light workers apply now.")
    threshold_source: str = Field(description="'configured' or the decision it comes from.")
    light_stages: int = Field(description="Jobs the light model ran in the window.")
    escalated: int = Field(description="Of them, those the discriminator sent on to the heavy model.")
    escalation_rate: float | None
    discriminator: dict[str, Any] | None = Field(
        description="{version, accuracy, features} of the light model's."
    )
    decision: CascadeDecisionView | None = Field(
        description="The allocator's latest decision; null before one."
    )


class MonitorView(BaseModel):
    """How the pool monitor is configured (REPRISE_MONITOR_*): a replay records it next to the pools."""

    enabled: bool
    mode: str = Field(description="quality or throughput (MoDM 5.3.1, 5.3.2).")
    period_s: int
    cohost: bool = Field(
        description="Whether a small worker also hosts the large model and takes misses when no hit waits "
        "(REPRISE_COHOST, as the workers apply it)."
    )


class LookupView(BaseModel):
    """How the stack looks prompts up and serves hits (REPRISE_LOOKUP_MODE, REPRISE_HIT_POLICY,
    REPRISE_K_TABLE as resolved): a replay records what the stack ran, not what its own process reads."""

    lookup: str = Field(description="text (NIRVANA 4.2) or image (MoDM 5.2).")
    hit_policy: str = Field(description="resume (NIRVANA) or refine (MoDM).")
    k_table: str = Field(description="The table in use: a preset's name (lab-t2i), or a custom table's text.")
    embedder: str = Field(description="The space lookups embed in (e.g. lab:attributes).")


class ReadsView(BaseModel):
    """LatentBox's read path: the live decode nodes and how reads are routed and delivered."""

    nodes: dict[str, dict[str, Any]] = Field(
        description="Each live decode node: its set-up, alpha, bytes and objects per tier, tier hit ratios, "
        "decodes, promotions, evictions, spills served, write-backs, T_decode and T_fetch (ms), queue depth, "
        "and its latest tuning decision (Eq. 2's inputs, D, alpha before and after)."
    )
    spill_theta: int = Field(description="Queue depth past which an owner's decode spills (LatentBox 6.5.3).")
    store: str = Field(description="What the durable store keeps: latents, or images too.")
    delivery: str = Field(description="How stored images are handed over: bytes or redirect.")
    retention_days: float | None = Field(description="Outputs older than this are deleted; null: kept.")


class Stats(BaseModel):
    scope: Literal["tenant", "global"] = Field(
        description="tenant: the caller's jobs only (service-wide fields empty); global: the whole service."
    )
    window_s: int
    since: datetime
    jobs: dict[str, int] = Field(description="Jobs created in the window, per status.")
    cache: CacheStats
    compute: ComputeStats
    quality: QualityStats = Field(
        description="The scorer's scores (the lab judge's on the lab's models; null where none ran)."
    )
    queues: dict[str, int | None] = Field(
        description="Messages waiting per queue; null when the broker is down."
    )
    pools: dict[str, int] = Field(description="Workers per role (worker_roles); global scope only.")
    pool_monitor: PoolDecisionView | None = Field(
        None, description="The pool monitor's latest decision; null before the first."
    )
    monitor: MonitorView | None = Field(None, description="The pool monitor's configuration.")
    lookup: LookupView | None = Field(
        None, description="The cache lookup's configuration; global scope only."
    )
    decodes: DecodeStats | None = Field(None, description="VAE decodes at generation and on read.")
    cascade: CascadeView | None = Field(
        None, description="DiffServe's cascade and its allocator; global scope only."
    )
    reads: ReadsView | None = Field(None, description="The read path's decode nodes; global scope only.")
    quality_guard: QualityGuardView | None = Field(
        None, description="The quality guard: target, estimate, table in use, last change; global scope only."
    )
    intervals: list[IntervalRow] = Field(
        description="The latest interval aggregates, newest first; global scope only."
    )


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the problem statuses a route can answer (see problem_media_types)."""
    return {status: {"model": ProblemDetails} for status in statuses}


PROBLEM_CONTENT = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/ProblemDetails"}}}


def problem_media_types(spec: dict[str, Any]) -> dict[str, Any]:
    """Document every 4xx/5xx as application/problem+json with ProblemDetails, which is what is sent
    (FastAPI files `responses` models under application/json and adds its own 422 schema); the
    OpenAI-compatible paths keep their OpenAI error model under application/json."""
    for name, path in spec.get("paths", {}).items():
        for operation in path.values():
            if is_openai_path(name):  # OpenAI's error shape, as the route documents it; a 422 is a 400 there
                operation.get("responses", {}).pop("422", None)
                continue
            for code, response in operation.get("responses", {}).items():
                if code[:1] in ("4", "5"):
                    response["content"] = PROBLEM_CONTENT
    for unused in ("HTTPValidationError", "ValidationError"):
        spec.get("components", {}).get("schemas", {}).pop(unused, None)
    return spec
