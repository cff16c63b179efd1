"""When the client tries a request again, and after how long: pure rules, no I/O, shared by the sync
and the async client.

A request is retried only when repeating it cannot do anything twice: a read (GET), or a create, which
always carries an Idempotency-Key (the server answers a repeat with the first job). It is retried on
429, 502, 503 and 504 and on connection errors (refused, reset, timed out), at most `attempts` times in
all and within `total_s` seconds of the first try. The pause before a retry is the server's
Retry-After when it sent one (seconds or an HTTP date, RFC 9110 10.2.3), else exponential backoff with
full jitter (a random pause in [0, min(max_backoff_s, backoff_s * 2 ** retry)]), as AWS's
"Exponential Backoff and Jitter" recommends so that many clients do not retry in step. A pause that
would end past `total_s` is not taken: the last answer (or error) is the call's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How persistent a client is. The defaults try 5 times within 60 s: pauses of about 0.5, 1, 2
    and 4 s at most, unless the server says when. `RetryPolicy(attempts=1)` never retries."""

    attempts: int = 5  # tries of one request, the first included
    total_s: float = 60.0  # no retry starts later than this after the first try
    backoff_s: float = 0.5  # the first pause's ceiling; it doubles with each retry
    max_backoff_s: float = 20.0  # the largest ceiling of a pause computed here (a Retry-After may be longer)
    statuses: frozenset[int] = field(default=RETRY_STATUSES)

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.total_s < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("attempts must be at least 1 and the durations not negative")

    def backoff(self, retry: int, *, draw: Callable[[], float] = random.random) -> float:
        """The pause before retry number `retry` (1 for the first retry) when the server said nothing:
        full jitter, a uniform draw below the doubled ceiling."""
        ceiling = min(self.max_backoff_s, self.backoff_s * 2.0 ** (retry - 1))
        return ceiling * draw()


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Retry-After in seconds from now: delay-seconds ("120") or an HTTP date ("Wed, 21 Oct 2015
    07:28:00 GMT"); a date in the past is 0; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class Attempts:
    """The retries of one call: ask `pause_after` after each failed try; None means stop there."""

    def __init__(self, policy: RetryPolicy, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self.started = clock()
        self.tried = 0

    def retryable(self, status: int) -> bool:
        return status in self.policy.statuses

    def pause_after(self, *, retry_after: float | None = None) -> float | None:
        """Seconds to sleep before the next try, or None when the attempts or the time are spent."""
        self.tried += 1
        if self.tried >= self.policy.attempts:
            return None
        pause = retry_after if retry_after is not None else self.policy.backoff(self.tried)
        if self.clock() + pause - self.started > self.policy.total_s:
            return None
        return pause
