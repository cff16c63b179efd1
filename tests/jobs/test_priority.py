"""A job's priority and deadline as policy (jobs.priority): the broker step of its messages, the
admission order, and the decision to refuse a deadline at submission."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.vocabulary import DEFAULT_HIGH_LIMIT, OnDeadline, Priority
from db.models import Tenant
from jobs.priority import admission_key, broker_step, check_deadline, deadline_passed

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def test_high_is_taken_first_on_redis_and_every_priority_has_a_step_of_its_own() -> None:
    # kombu's Redis transport takes step 0 first (BRPOP lists it first): lower is sooner.
    assert broker_step(Priority.HIGH) < broker_step(Priority.NORMAL) < broker_step(Priority.LOW)
    assert {broker_step(p) for p in Priority} <= {0, 3, 6, 9}  # kombu's default priority steps
    assert broker_step("high") == 0 and broker_step("normal") == 3  # rows hold the names


@pytest.mark.parametrize(
    ("deadline_s", "on_deadline", "finish_s", "refused"),
    [
        (10.0, OnDeadline.FAIL, 12.5, True),  # late, and asked to fail
        (10.0, OnDeadline.FAIL, 9.9, False),  # in time
        (10.0, OnDeadline.FAIL, 10.0, False),  # exactly on time is in time
        (10.0, OnDeadline.BEST_EFFORT, 60.0, False),  # late, but asked to run anyway
        (10.0, OnDeadline.FAIL, None, False),  # no estimate: no guess refuses work
        (None, OnDeadline.FAIL, 60.0, False),  # no deadline
    ],
)
def test_a_deadline_is_refused_only_when_late_and_asked_to_fail(
    deadline_s: float | None, on_deadline: OnDeadline, finish_s: float | None, refused: bool
) -> None:
    check = check_deadline(deadline_s=deadline_s, on_deadline=on_deadline, estimated_finish_s=finish_s)
    assert check.refused is refused and check.estimated_finish_s == finish_s


def test_admission_orders_by_priority_then_earliest_deadline_then_arrival() -> None:
    soon, later = NOW + timedelta(seconds=5), NOW + timedelta(seconds=50)
    waiting = {
        "normal, no deadline, first": ("normal", None, 0),
        "low, soonest deadline": ("low", soon, 1),
        "normal, later deadline": ("normal", later, 2),
        "high, no deadline": ("high", None, 3),
        "normal, soon deadline": ("normal", soon, 4),
        "normal, no deadline, second": (None, None, 5),  # a row from before priorities: normal
    }
    order = sorted(waiting, key=lambda name: admission_key(*waiting[name]))
    assert order == [
        "high, no deadline",
        "normal, soon deadline",
        "normal, later deadline",
        "normal, no deadline, first",
        "normal, no deadline, second",
        "low, soonest deadline",
    ]


def test_the_tenants_high_limit_defaults_to_the_documented_cap() -> None:
    column = Tenant.__table__.c.high_limit
    assert column.default.arg == DEFAULT_HIGH_LIMIT and column.server_default.arg == str(DEFAULT_HIGH_LIMIT)


def test_a_deadline_has_passed_only_for_a_job_that_asked_to_fail_on_it() -> None:
    created = NOW - timedelta(seconds=30)
    assert deadline_passed(created_at=created, deadline_s=10.0, on_deadline="fail", now=NOW)
    assert not deadline_passed(created_at=created, deadline_s=60.0, on_deadline="fail", now=NOW)  # in time
    assert not deadline_passed(created_at=created, deadline_s=10.0, on_deadline="best_effort", now=NOW)
    assert not deadline_passed(created_at=created, deadline_s=None, on_deadline="fail", now=NOW)
