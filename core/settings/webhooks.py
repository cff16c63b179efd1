"""Webhooks: where a job's signed event (Standard Webhooks) may be delivered, and how delivery is
retried."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode


class WebhookSettings(BaseSettings):
    """Webhooks: allowed hosts, the retry schedule, the timeout of a delivery, its output link's life.

    The webhooks queue's workers read these when they POST a job's signed event to its webhook URL.
    """

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
    webhook_timeout_s: float = Field(
        10.0,
        gt=0,
        le=120,
        description="Timeout of each step of a webhook POST (connect, send, each read), seconds; the whole "
        "attempt is bounded by REPRISE_WEBHOOK_ATTEMPT_DEADLINE_S.",
    )
    webhook_attempt_deadline_s: float = Field(
        15.0,
        gt=0,
        le=120,
        description="Wall-clock budget of one delivery attempt, seconds: connecting, sending and reading the "
        "whole answer. A receiver that has not answered by then (one that trickles its answer included) "
        "is cut off and the attempt counts as failed. Default: Svix's 15 s per attempt (Stripe documents "
        "no figure beyond 'respond quickly'); receivers are asked to acknowledge at once and work later.",
    )
    webhook_response_max_bytes: int = Field(
        65536,
        ge=0,
        description="Bytes of a receiver's answer read at most; past them the connection is closed and the "
        "status line alone decides. Default 64 KiB: an acknowledgement is a few bytes, and 64 KiB (one TCP "
        "window) costs a single round trip; a 100 MB answer costs no more.",
    )
    webhook_endpoint_concurrency: int = Field(
        4,
        ge=1,
        description="Deliveries in flight at once to one endpoint (scheme, host, port), across every webhook "
        "consumer (a semaphore in Redis); a delivery that finds its endpoint's slots taken is queued again "
        "a few seconds later rather than wait. Default 4: a quarter of REPRISE_WEBHOOK_THREADS, so three "
        "slow endpoints still leave a quarter of the pool to every other one.",
    )
    webhook_pause_after_timeouts: int = Field(
        3,
        ge=0,
        description="An endpoint whose last this many attempts in a row went unanswered (the attempt's "
        "deadline, a connect or read timeout) is paused: it is sent nothing but the reconciler's probe "
        "(every REPRISE_WEBHOOK_PROBE_S) until it answers; its other attempts are recorded as failed "
        "without a request. 0: never pause. Default 3: one timeout can be a blip (a deploy, a pause "
        "of the receiver's runtime), three in a row are 45 s of a delivery thread spent on an endpoint "
        "that does not answer; an endpoint that answers, even 5xx, is never paused.",
    )
    webhook_threads: int = Field(
        16,
        ge=1,
        le=256,
        description="Threads of a worker that consumes the webhooks queue alone (`reprise worker --role io "
        "--queues webhooks`): a delivery waits on the network, not the CPU. Default 16: four endpoints "
        "at REPRISE_WEBHOOK_ENDPOINT_CONCURRENCY each.",
    )
    webhook_probe_s: float = Field(
        20.0,
        gt=0,
        description="An endpoint whose deliveries wait after failures is probed this often (the reconciler "
        "re-sends its earliest waiting event, recorded only if answered 2xx; a failed probe changes no "
        "schedule): once it answers, every waiting delivery is sent at once. 20 s: probe + the "
        "reconciler's period (10 s) + the sweep fit the one-minute recovery budget "
        "(docs/results/chaos.md); a down endpoint gets three requests a minute.",
    )
    output_link_ttl_s: float = Field(
        3600.0,
        gt=0,
        le=7 * 24 * 3600,
        description="Seconds a completed event's `signed_output` link (GET /v1/outputs/{id}, no API key "
        "needed, signed with the server's REPRISE_OUTPUT_LINK_KEY) stays valid from the delivery attempt "
        "that carries it; then 410. Default: an hour, as Replicate's and OpenAI's output URLs. At most "
        "REPRISE_OUTPUT_LINK_MAX_TTL_S.",
    )

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
