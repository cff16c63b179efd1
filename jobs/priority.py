"""A job's priority and deadline as policy: the broker's priority step of each of its messages, the
order a worker admits waiting jobs in, and whether a deadline can be met when the job is submitted.
Pure: the estimate comes in (jobs.estimates), the clock is a parameter.

Priority steps. kombu's Redis transport keeps one list per priority step of a queue (its default
steps 0, 3, 6, 9; a message's priority is rounded down to a step) and a worker's BRPOP names the
step-0 lists of all its queues first, then step 3's, and so on: on Redis a lower number is taken
sooner (the reverse of AMQP's). So `high` is step 0, `normal` step 3, `low` step 6, every message of a
job (admission, its run on a pool, a cascade's escalation) at its job's step. `normal` is not 0, so
that `high` has a step above the bulk of the traffic; step 9 stays free. Messages sent without a
priority (webhooks, reads, audits: queues of their own) are step 0, which changes nothing for them; a
run resumed after a lost lease is pushed at the consuming end of step 0 (jobs.dispatch), before even
`high`, as the oldest work there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.vocabulary import PRIORITY_RANK as RANK
from core.vocabulary import OnDeadline, Priority

DEADLINE_UNMET = "deadline-unmet"  # the failure reason of a job its deadline passed before it ran
BROKER_STEP: dict[Priority, int] = {Priority.HIGH: 0, Priority.NORMAL: 3, Priority.LOW: 6}


def broker_step(priority: str | Priority) -> int:
    """The kombu priority a job's messages carry (see the module's docstring)."""
    return BROKER_STEP[Priority(priority)]


@dataclass(frozen=True, slots=True)
class DeadlineCheck:
    """Whether a submitted job is refused for its deadline, and the estimate the decision read."""

    refused: bool
    estimated_finish_s: float | None


def check_deadline(
    *, deadline_s: float | None, on_deadline: str | OnDeadline, estimated_finish_s: float | None
) -> DeadlineCheck:
    """Refuse when the request asks to fail (`on_deadline: fail`) and the estimated finish is past the
    deadline. Without an estimate (no recent run on the route, or no worker) nothing is refused: a
    guess would refuse work that may well make it; best_effort is never refused."""
    late = deadline_s is not None and estimated_finish_s is not None and estimated_finish_s > deadline_s
    return DeadlineCheck(
        refused=late and OnDeadline(on_deadline) is OnDeadline.FAIL, estimated_finish_s=estimated_finish_s
    )


def deadline_passed(
    *, created_at: datetime, deadline_s: float | None, on_deadline: str, now: datetime
) -> bool:
    """Whether a job that asked to fail on its deadline (`on_deadline: fail`) is past it already: it
    could only end late, so it fails now with DEADLINE_UNMET rather than run."""
    if deadline_s is None or OnDeadline(on_deadline) is not OnDeadline.FAIL:
        return False
    return now > created_at + timedelta(seconds=deadline_s)


def admission_key(priority: str | None, due_at: datetime | None, arrived: int) -> tuple[int, int, float, int]:
    """The order a worker admits waiting jobs in: by priority, then earliest deadline first (EDF; jobs
    without one after those with one), then in arrival order."""
    rank = RANK[Priority(priority or Priority.NORMAL)]
    if due_at is None:
        return (rank, 1, 0.0, arrived)
    return (rank, 0, due_at.timestamp(), arrived)
