"""The client's errors: the server's problem+json (RFC 9457), and a wait that ran out."""

from __future__ import annotations

from typing import Any


class RepriseError(Exception):
    """Base of the client's errors."""


class ApiError(RepriseError):
    """The server answered 4xx or 5xx. `problem` is its problem+json body (type, title, detail, errors)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.type = str(problem.get("type", "about:blank"))
        self.detail = str(problem.get("detail", ""))
        super().__init__(f"{status} {self.type}: {self.detail}")


class WaitTimeout(RepriseError):
    """The job did not end within the wait."""
