"""The server's objects as typed values (the OpenAPI document's Generation and GenerationList)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

TERMINAL = frozenset({"succeeded", "failed", "canceled"})
Priority = Literal["low", "normal", "high"]  # how soon a job runs against the others waiting
OnDeadline = Literal[
    "fail", "best_effort"
]  # fail: refused at once (422 deadline-unmet) when it cannot be met


@dataclass(frozen=True)
class Progress:
    """How far a run got: schedule steps done of T (a cache hit starts at its k)."""

    step: int
    total: int
    estimated_remaining_s: float | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any] | None) -> Progress | None:
        if not body:
            return None
        return cls(int(body["step"]), int(body["total"]), body.get("estimated_remaining_s"))


@dataclass(frozen=True)
class QueuePlace:
    """Where a waiting job stands: 1 is next; the estimates are null with no recent history."""

    position: int
    estimated_start_s: float | None = None
    estimated_finish_s: float | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any] | None) -> QueuePlace | None:
        if not body:
            return None
        return cls(int(body["position"]), body.get("estimated_start_s"), body.get("estimated_finish_s"))


@dataclass(frozen=True)
class Generation:
    """A job: its status, what was asked, what came out, and how. `kind` is "image" or "video": a video
    job's input has frames, fps and noise_window, its output and urls a `video` link instead of `image`,
    its metrics video_hit and background_entry."""

    id: str
    status: str
    input: dict[str, Any]
    output: dict[str, Any] | None
    error: str | None
    metrics: dict[str, Any]
    urls: dict[str, str]
    progress: Progress | None = None
    queue: QueuePlace | None = None
    created_at: str | None = None
    started_at: str | None = None
    completed_at: str | None = None
    kind: str = "image"
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def priority(self) -> Priority:
        return self.input.get("priority", "normal")  # type: ignore[no-any-return]

    @property
    def deadline_s(self) -> float | None:
        """Seconds from submission the job was asked to end by (None: no deadline)."""
        return self.input.get("deadline_s")

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
            progress=Progress.from_json(body.get("progress")),
            queue=QueuePlace.from_json(body.get("queue")),
            created_at=body.get("created_at"),
            started_at=body.get("started_at"),
            completed_at=body.get("completed_at"),
            kind=str(body.get("kind") or "image"),
            raw=body,
        )


@dataclass(frozen=True)
class GenerationPage:
    results: list[Generation]
    next: str | None
