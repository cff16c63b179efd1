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
    webhook_timeout_s: float = Field(10.0, gt=0, le=120, description="Timeout of one webhook POST, seconds.")
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
        "needed, signed with the tenant's webhook secret) stays valid from the delivery attempt that "
        "carries it; then 410. Default: an hour, as Replicate's and OpenAI's output URLs. At most 7 days.",
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
