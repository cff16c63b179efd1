"""The client's errors: the server's problem+json (RFC 9457) as one class per kind of answer, a
connection that could not be made, a wait that ran out, and a client without its configuration.

    RepriseError
    ├── ConfigurationError   no base URL or API key (argument or environment). Not recoverable.
    ├── ConnectionFailed     the server could not be reached, after the retries. Recoverable later.
    ├── WaitTimeout          the job did not end within the wait. Recoverable: wait again.
    └── ApiError             the server answered 4xx or 5xx; `problem` is its body
        ├── InvalidRequest       400, 413, 422: the request itself is wrong (see `errors`)
        ├── Unauthorized         401: no key, or a revoked one
        ├── Forbidden            403
        ├── NotFound             404: no such job for this key
        ├── Gone                 410
        ├── RateLimited          429: too many jobs in flight; `retry_after` says when to try again
        └── ServerError          5xx
            └── ServiceUnavailable  503: overloaded or a dependency down; `retry_after` too
"""

from __future__ import annotations

from typing import Any


class RepriseError(Exception):
    """Base of the client's errors."""


class ConfigurationError(RepriseError, ValueError):
    """The client was built without a base URL or an API key, and the environment names none."""


class ConnectionFailed(RepriseError):
    """No answer from the server (refused, reset, timed out), after the retries the client allows.
    The transport's error is `__cause__`."""


class WaitTimeout(RepriseError):
    """The job did not end within the wait."""


class ApiError(RepriseError):
    """The server answered 4xx or 5xx. `problem` is its problem+json body; its members are attributes
    too: `type` (a stable URN per kind of problem), `title`, `detail`, `instance`, `errors` (one item per
    offending field, for invalid input). `retry_after` is the server's Retry-After in seconds, if any."""

    def __init__(self, status: int, problem: dict[str, Any], *, retry_after: float | None = None) -> None:
        self.status = status
        self.problem = problem
        self.type = str(problem.get("type", "about:blank"))
        self.title = str(problem.get("title", ""))
        self.detail = str(problem.get("detail", ""))
        self.instance = str(problem.get("instance", ""))
        errors = problem.get("errors")
        self.errors: list[dict[str, Any]] = list(errors) if isinstance(errors, list) else []
        self.retry_after = retry_after
        super().__init__(f"{status} {self.type}: {self.detail}")


class InvalidRequest(ApiError):
    """400, 413 or 422: the request is wrong as sent; `errors` names each offending field."""


class Unauthorized(ApiError):
    """401: no API key, or one the server does not know (revoked, mistyped)."""


class Forbidden(ApiError):
    """403: the key may not do this (an admin-only read), or a signed link did not check out."""


class NotFound(ApiError):
    """404: no such job for this key (never created, deleted, or another tenant's)."""


class Gone(ApiError):
    """410: it existed and is no more (an expired signed link)."""


class RateLimited(ApiError):
    """429: the tenant has as many jobs in flight as it may. Recoverable after `retry_after`."""


class ServerError(ApiError):
    """5xx: the server failed. Recoverable, usually."""


class ServiceUnavailable(ServerError):
    """503: the server is overloaded or a dependency is down. Recoverable after `retry_after`."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    410: Gone,
    413: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
    503: ServiceUnavailable,
}


def api_error(status: int, problem: dict[str, Any], *, retry_after: float | None = None) -> ApiError:
    """The typed error for an answer's status: ServerError for an unlisted 5xx, ApiError otherwise."""
    kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return kind(status, problem, retry_after=retry_after)
