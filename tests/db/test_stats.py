"""Interval statistics on the real database: upserted increments per period, the /v1/stats summary and
the pool monitor's last complete period."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from core.settings import Settings
from core.vocabulary import AdmissionOutcome
from db import stats
from db.engine import session_scope

pytestmark = pytest.mark.integration


@pytest.fixture
def period_seconds() -> int:
    """A period length no other test writes, so rows never mix."""
    return random.Random().randint(10_000, 2_000_000)


@pytest.fixture
def start(period_seconds: int) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + timedelta(seconds=period_seconds * (10**9 // period_seconds))


def test_admissions_accumulate_in_their_period(
    db_settings: Settings, period_seconds: int, start: datetime
) -> None:
    at = start + timedelta(seconds=5)
    events = [
        (AdmissionOutcome.HIT, 25),
        (AdmissionOutcome.HIT, 10),
        (AdmissionOutcome.HIT, 10),
        (AdmissionOutcome.SEARCHED_MISS, None),
        (AdmissionOutcome.PREDICTED_MISS, None),
        (AdmissionOutcome.CACHE_OFF, None),
    ]
    for outcome, k in events:
        with session_scope(db_settings) as session:
            stats.record_admission(session, outcome=outcome, k=k, at=at, period_seconds=period_seconds)
    # One more in the next period: not part of this one.
    with session_scope(db_settings) as session:
        stats.record_admission(
            session,
            outcome=AdmissionOutcome.HIT,
            k=5,
            at=start + timedelta(seconds=period_seconds + 1),
            period_seconds=period_seconds,
        )
        summary = stats.cache_summary(
            session,
            since=start,
            until=start + timedelta(seconds=period_seconds),
            period_seconds=period_seconds,
        )
        both = stats.cache_summary(session, since=start, period_seconds=period_seconds)
    assert (summary.arrivals, summary.hits, summary.misses, summary.predicted_misses) == (6, 3, 3, 1)
    assert summary.k_histogram == {10: 2, 25: 1}
    assert summary.hit_rate == pytest.approx(0.5)
    assert summary.steps_saved == 45
    assert both.arrivals == 7 and both.k_histogram == {5: 1, 10: 2, 25: 1}


def test_a_hit_needs_its_k(db_settings: Settings) -> None:
    with session_scope(db_settings) as session, pytest.raises(ValueError, match="k it skipped"):
        stats.record_admission(session, outcome=AdmissionOutcome.HIT)


def test_concurrent_writers_lose_no_increment(
    db_settings: Settings, period_seconds: int, start: datetime
) -> None:
    at = start + timedelta(seconds=1)

    def admit(i: int) -> None:
        with session_scope(db_settings) as session:
            stats.record_admission(
                session, outcome=AdmissionOutcome.HIT, k=5 * (1 + i % 2), at=at, period_seconds=period_seconds
            )
            stats.record_service(
                session, role="small", service_ms=10.0, steps=40, at=at, period_seconds=period_seconds
            )

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(admit, range(40)))
    with session_scope(db_settings) as session:
        summary = stats.cache_summary(session, since=start, period_seconds=period_seconds)
        period = stats.last_period(
            session, now=start + timedelta(seconds=period_seconds + 3), period_seconds=period_seconds
        )
    assert summary.hits == 40 and summary.k_histogram == {5: 20, 10: 20}
    assert period.service["small"].count == 40 and period.service["small"].steps == 1600


def test_last_period_feeds_the_pool_monitor(
    db_settings: Settings, period_seconds: int, start: datetime
) -> None:
    at = start + timedelta(seconds=2)
    with session_scope(db_settings) as session:
        for k in (5, 5, 15, 25):
            stats.record_admission(
                session, outcome=AdmissionOutcome.HIT, k=k, at=at, period_seconds=period_seconds
            )
        for _ in range(4):
            stats.record_admission(
                session, outcome=AdmissionOutcome.SEARCHED_MISS, at=at, period_seconds=period_seconds
            )
        for role, service_ms, steps, model in (
            ("large", 9000.0, 50, "sd-large"),
            ("large", 7000.0, 50, "sd-large"),
            ("small", 1000.0, 25, "sd-small"),
        ):
            stats.record_service(
                session,
                role=role,
                service_ms=service_ms,
                steps=steps,
                denoiser_evals={model: steps},
                at=at,
                period_seconds=period_seconds,
            )
        # In the current (incomplete) period: the monitor must not see it yet.
        stats.record_admission(
            session,
            outcome=AdmissionOutcome.HIT,
            k=5,
            at=start + timedelta(seconds=period_seconds + 1),
            period_seconds=period_seconds,
        )
        period = stats.last_period(
            session, now=start + timedelta(seconds=period_seconds + 30), period_seconds=period_seconds
        )
        empty = stats.last_period(
            session, now=start + timedelta(seconds=5 * period_seconds), period_seconds=period_seconds
        )
    assert period.start == start and period.seconds == period_seconds
    assert period.cache.arrivals == 8 and period.cache.hit_rate == pytest.approx(0.5)
    assert period.request_rate == pytest.approx(8 / period_seconds)
    assert period.k_rates == {5: 0.5, 15: 0.25, 25: 0.25}
    assert period.service["large"].mean_ms == pytest.approx(8000.0)
    assert period.service["large"].ms_per_step == pytest.approx(160.0)
    assert period.service["small"].count == 1
    assert period.denoiser_evals == {"sd-large": 100, "sd-small": 25}
    assert empty.cache.arrivals == 0 and empty.k_rates == {} and empty.service == {}


def test_stats_between_joins_several_intervals_into_one_period(
    db_settings: Settings, period_seconds: int, start: datetime
) -> None:
    # A monitoring period of three intervals: arrivals and service add up, the rate is over all three.
    with session_scope(db_settings) as session:
        for interval, (outcome, k) in enumerate(
            [(AdmissionOutcome.HIT, 10), (AdmissionOutcome.SEARCHED_MISS, None), (AdmissionOutcome.HIT, 30)]
        ):
            at = start + timedelta(seconds=interval * period_seconds + 1)
            stats.record_admission(session, outcome=outcome, k=k, at=at, period_seconds=period_seconds)
            stats.record_service(
                session, role="small", service_ms=100.0, steps=20, at=at, period_seconds=period_seconds
            )
        after = start + timedelta(seconds=3 * period_seconds + 1)  # the next interval: outside
        stats.record_admission(
            session, outcome=AdmissionOutcome.HIT, k=10, at=after, period_seconds=period_seconds
        )
        period = stats.stats_between(
            session,
            since=start,
            until=start + timedelta(seconds=3 * period_seconds),
            period_seconds=period_seconds,
        )
    assert (period.seconds, period.cache.arrivals, period.cache.hits) == (3 * period_seconds, 3, 2)
    assert period.request_rate == 3 / (3 * period_seconds)
    assert period.k_rates == {10: 0.5, 30: 0.5}
    assert period.service["small"].ms_per_step == 300.0 / 60
    with pytest.raises(ValueError, match="empty window"):
        stats.stats_between(session, since=start, until=start, period_seconds=period_seconds)
