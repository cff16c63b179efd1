"""The server's objects as typed values (the OpenAPI document's Generation and GenerationList)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL = frozenset({"succeeded", "failed", "canceled"})


@dataclass(frozen=True)
class Generation:
    """A job: its status, what was asked, what came out, and how."""

    id: str
    status: str
    input: dict[str, Any]
    output: dict[str, Any] | None
    error: str | None
    metrics: dict[str, Any]
    urls: dict[str, str]
    created_at: str | None = None
    started_at: str | None = None
    completed_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Generation:
        return cls(
            id=str(body["id"]),
            status=str(body["status"]),
            input=dict(body.get("input") or {}),
            output=body.get("output"),
            error=body.get("error"),
            metrics=dict(body.get("metrics") or {}),
            urls=dict(body.get("urls") or {}),
            created_at=body.get("created_at"),
            started_at=body.get("started_at"),
            completed_at=body.get("completed_at"),
            raw=body,
        )


@dataclass(frozen=True)
class GenerationPage:
    results: list[Generation]
    next: str | None
