"""Per-interval statistics (interval_stats): what admission decided and what the pools spent.

One row per (period_start, period_seconds). Writers upsert increments into the row of the period
that contains the event (by the database's clock unless `at` is given), so any number of admit and
GPU workers can record concurrently without a read-modify-write race. Readers aggregate rows for
/v1/stats (`cache_summary`) and for the pool monitor (`last_period`, MoDM 5.3 Algorithm 1 inputs:
hit rate, request rate and the distribution of k over the last monitoring period).

How outcomes count: every admission is an arrival; a hit counts in `hits` and in the k histogram;
everything else (searched miss, predicted miss, caching turned off by the request) counts in
`misses`, since all of it is full-length work for the large pool; predicted misses are also
counted apart. A hit that ran as a miss is moved to `misses` in the interval that counted it
(`correct_hit_to_miss`). Functions flush nothing and do not commit: the caller owns the transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from core.vocabulary import AdmissionOutcome
from db.models import IntervalStats

DEFAULT_PERIOD_SECONDS = 60
"""Length of one statistics interval. MoDM 5.3 re-plans once per monitoring period; one minute keeps
a period's hit rate meaningful at a few requests per second while reacting within minutes."""

_PERIOD = (
    "date_bin(make_interval(secs => :seconds), "
    "COALESCE(CAST(:at AS timestamptz), now()), TIMESTAMPTZ 'epoch')"
)


def _add_maps(current: str, increment: str) -> str:
    """SQL: two flat JSON objects of numbers summed key by key."""
    return (
        "(SELECT COALESCE(jsonb_object_agg(key, total), '{}'::jsonb) FROM ("
        "SELECT key, sum(value::numeric) AS total FROM ("
        f"SELECT * FROM jsonb_each_text({current}) UNION ALL SELECT * FROM jsonb_each_text({increment})"
        ") AS parts GROUP BY key) AS sums)"
    )


_RECORD_ADMISSION = text(
    f"""
    INSERT INTO interval_stats AS s
        (period_start, period_seconds, arrivals, hits, misses, predicted_misses, k_histogram,
         service_time, denoiser_evals)
    VALUES ({_PERIOD}, :seconds, 1, :hit, :miss, :predicted_miss, CAST(:histogram AS jsonb), '{{}}', '{{}}')
    ON CONFLICT (period_start, period_seconds) DO UPDATE SET
        arrivals = s.arrivals + 1,
        hits = s.hits + EXCLUDED.hits,
        misses = s.misses + EXCLUDED.misses,
        predicted_misses = s.predicted_misses + EXCLUDED.predicted_misses,
        k_histogram = {_add_maps("s.k_histogram", "EXCLUDED.k_histogram")}
    """
)

_RECORD_SERVICE = text(
    f"""
    INSERT INTO interval_stats AS s
        (period_start, period_seconds, arrivals, hits, misses, predicted_misses, k_histogram,
         service_time, denoiser_evals)
    VALUES ({_PERIOD}, :seconds, 0, 0, 0, 0, '{{}}', CAST(:service AS jsonb), CAST(:evals AS jsonb))
    ON CONFLICT (period_start, period_seconds) DO UPDATE SET
        service_time = s.service_time || jsonb_build_object(
            CAST(:role AS text),
            {
        _add_maps(
            "COALESCE(s.service_time -> CAST(:role AS text), '{}'::jsonb)",
            "EXCLUDED.service_time -> CAST(:role AS text)",
        )
    }
        ),
        denoiser_evals = {_add_maps("s.denoiser_evals", "EXCLUDED.denoiser_evals")}
    """
)


def record_admission(
    session: Session,
    *,
    outcome: AdmissionOutcome,
    k: int | None = None,
    at: datetime | None = None,
    period_seconds: int = DEFAULT_PERIOD_SECONDS,
) -> None:
    """Count one admission in its interval. A hit needs its k (steps skipped)."""
    hit = outcome is AdmissionOutcome.HIT
    if hit and (k is None or k < 1):
        raise ValueError(f"a hit must record the k it skipped (got {k!r})")
    session.execute(
        _RECORD_ADMISSION,
        {
            "seconds": period_seconds,
            "at": at,
            "hit": int(hit),
            "miss": int(not hit),
            "predicted_miss": int(outcome is AdmissionOutcome.PREDICTED_MISS),
            "histogram": json.dumps({str(k): 1} if hit else {}),
        },
    )


_CORRECT_HIT_TO_MISS = text(
    f"""
    UPDATE interval_stats AS s SET
        hits = s.hits - 1,
        misses = s.misses + 1,
        k_histogram = {_add_maps("s.k_histogram", "CAST(:histogram AS jsonb)")}
    WHERE s.period_start = {_PERIOD} AND s.period_seconds = :seconds AND s.hits > 0
    """
)


def correct_hit_to_miss(
    session: Session, *, k: int, at: datetime, period_seconds: int = DEFAULT_PERIOD_SECONDS
) -> bool:
    """A hit counted at `at` ran as a miss (its source was evicted, or no worker could resume it):
    move it from `hits` and the k histogram to `misses` in the interval that counted it, so the hit
    rate and k distribution (/v1/stats, the pool monitor) count what ran. Returns whether a row was
    corrected. The caller makes it once per job (db.job_runs.reroute_to_miss)."""
    result = session.execute(
        _CORRECT_HIT_TO_MISS,
        {"seconds": period_seconds, "at": at, "histogram": json.dumps({str(k): -1})},
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def record_service(
    session: Session,
    *,
    role: str,
    service_ms: float,
    steps: int,
    denoiser_evals: Mapping[str, int] | None = None,
    at: datetime | None = None,
    period_seconds: int = DEFAULT_PERIOD_SECONDS,
) -> None:
    """Count one finished task of a pool role: its wall time, the denoising steps it ran, and the
    denoiser evaluations per model (compute accounting, DESIGN.md)."""
    if service_ms < 0 or steps < 0:
        raise ValueError("service_ms and steps cannot be negative")
    session.execute(
        _RECORD_SERVICE,
        {
            "seconds": period_seconds,
            "at": at,
            "role": role,
            "service": json.dumps({role: {"count": 1, "total_ms": service_ms, "steps": steps}}),
            "evals": json.dumps(dict(denoiser_evals or {})),
        },
    )


_RECORD_DECODES = text(
    f"""
    INSERT INTO interval_stats AS s
        (period_start, period_seconds, k_histogram, service_time, denoiser_evals,
         generations, generation_decodes, image_reads, read_decodes)
    VALUES ({_PERIOD}, :seconds, '{{}}', '{{}}', '{{}}', :generations, :generation_decodes, :image_reads,
            :read_decodes)
    ON CONFLICT (period_start, period_seconds) DO UPDATE SET
        generations = s.generations + EXCLUDED.generations,
        generation_decodes = s.generation_decodes + EXCLUDED.generation_decodes,
        image_reads = s.image_reads + EXCLUDED.image_reads,
        read_decodes = s.read_decodes + EXCLUDED.read_decodes
    """
)


def record_decodes(
    session: Session,
    *,
    generations: int = 0,
    generation_decodes: int = 0,
    image_reads: int = 0,
    read_decodes: int = 0,
    at: datetime | None = None,
    period_seconds: int = DEFAULT_PERIOD_SECONDS,
) -> None:
    """Count VAE work (LatentBox 4.1): a completed generation and the decodes it ran, an image read the
    API answered, a decode the decode pool ran for a read."""
    counts = (generations, generation_decodes, image_reads, read_decodes)
    if min(counts) < 0:
        raise ValueError(f"decode counters cannot be negative: {counts}")
    session.execute(
        _RECORD_DECODES,
        {
            "seconds": period_seconds,
            "at": at,
            "generations": generations,
            "generation_decodes": generation_decodes,
            "image_reads": image_reads,
            "read_decodes": read_decodes,
        },
    )


@dataclass(frozen=True, slots=True)
class DecodeSummary:
    """VAE decodes over a window: at generation (per completed job) and on read (per image read)."""

    generations: int = 0
    generation_decodes: int = 0
    image_reads: int = 0
    read_decodes: int = 0

    @property
    def per_job(self) -> float | None:
        return self.generation_decodes / self.generations if self.generations else None

    @property
    def per_read(self) -> float | None:
        return self.read_decodes / self.image_reads if self.image_reads else None


def decode_summary(
    session: Session, *, since: datetime, period_seconds: int = DEFAULT_PERIOD_SECONDS
) -> DecodeSummary:
    """The decode counters of the intervals that end after `since` (whole intervals, so the one that
    holds `since` counts in full)."""
    row = session.execute(
        select(
            func.coalesce(func.sum(IntervalStats.generations), 0),
            func.coalesce(func.sum(IntervalStats.generation_decodes), 0),
            func.coalesce(func.sum(IntervalStats.image_reads), 0),
            func.coalesce(func.sum(IntervalStats.read_decodes), 0),
        ).where(
            IntervalStats.period_seconds == period_seconds,
            IntervalStats.period_start > since - timedelta(seconds=period_seconds),
        )
    ).one()
    return DecodeSummary(*(int(value) for value in row))


@dataclass(frozen=True, slots=True)
class CacheSummary:
    """Admission totals over a window (/v1/stats). steps_saved = sum of k over hits."""

    arrivals: int = 0
    hits: int = 0
    misses: int = 0
    predicted_misses: int = 0
    k_histogram: dict[int, int] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.arrivals if self.arrivals else None

    @property
    def steps_saved(self) -> int:
        return sum(k * count for k, count in self.k_histogram.items())


@dataclass(frozen=True, slots=True)
class RoleService:
    """One role's work in a window: tasks, total wall time and steps run."""

    count: int
    total_ms: float
    steps: int

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0

    @property
    def ms_per_step(self) -> float | None:
        return self.total_ms / self.steps if self.steps else None


@dataclass(frozen=True, slots=True)
class PeriodStats:
    """One monitoring period, the inputs of MoDM's global monitor (5.3, Algorithm 1)."""

    start: datetime
    seconds: int
    cache: CacheSummary
    service: dict[str, RoleService]
    denoiser_evals: dict[str, int]

    @property
    def request_rate(self) -> float:
        """Arrivals per second (R)."""
        return self.cache.arrivals / self.seconds

    @property
    def k_rates(self) -> dict[int, float]:
        """Fraction of hits served at each k (Algorithm 1's k_rates)."""
        hits = self.cache.hits
        return {k: n / hits for k, n in sorted(self.cache.k_histogram.items())} if hits else {}


def _rows(
    session: Session, since: datetime, until: datetime | None, period_seconds: int
) -> list[IntervalStats]:
    query = select(IntervalStats).where(
        IntervalStats.period_seconds == period_seconds, IntervalStats.period_start >= since
    )
    if until is not None:
        query = query.where(IntervalStats.period_start < until)
    return list(session.scalars(query.order_by(IntervalStats.period_start)).all())


def _summary(rows: list[IntervalStats]) -> CacheSummary:
    histogram: dict[int, int] = {}
    for row in rows:
        for k, n in row.k_histogram.items():
            histogram[int(k)] = histogram.get(int(k), 0) + int(n)
    histogram = {k: n for k, n in histogram.items() if n > 0}  # a k whose hits were all corrected
    return CacheSummary(
        arrivals=sum(row.arrivals for row in rows),
        hits=sum(row.hits for row in rows),
        misses=sum(row.misses for row in rows),
        predicted_misses=sum(row.predicted_misses for row in rows),
        k_histogram=dict(sorted(histogram.items())),
    )


def cache_summary(
    session: Session,
    *,
    since: datetime,
    until: datetime | None = None,
    period_seconds: int = DEFAULT_PERIOD_SECONDS,
) -> CacheSummary:
    """Totals of the intervals starting in [since, until): hit rate, k histogram, steps saved."""
    return _summary(_rows(session, since, until, period_seconds))


def last_period(
    session: Session,
    *,
    now: datetime | None = None,
    period_seconds: int = DEFAULT_PERIOD_SECONDS,
) -> PeriodStats:
    """The last complete period before `now` (default: the database's clock); zeros if nothing ran."""
    clock = now if now is not None else session.scalar(select(func.now()))
    if clock is None:
        raise RuntimeError("the database returned no time")
    current = session.scalar(
        select(
            func.date_bin(timedelta(seconds=period_seconds), clock, datetime.fromtimestamp(0, clock.tzinfo))
        )
    )
    if current is None:
        raise RuntimeError("date_bin returned nothing")
    return stats_between(
        session,
        since=current - timedelta(seconds=period_seconds),
        until=current,
        period_seconds=period_seconds,
    )


def stats_between(
    session: Session,
    *,
    since: datetime,
    until: datetime,
    period_seconds: int = DEFAULT_PERIOD_SECONDS,
) -> PeriodStats:
    """The intervals starting in [since, until) as one period of `until - since` seconds (the pool
    monitor reads several intervals when its period is longer than one)."""
    seconds = int((until - since).total_seconds())
    if seconds <= 0:
        raise ValueError(f"an empty window: {since} .. {until}")
    rows = _rows(session, since, until, period_seconds)
    service: dict[str, RoleService] = {}
    evals: dict[str, int] = {}
    for row in rows:
        for role, totals in row.service_time.items():
            seen = service.get(role, RoleService(0, 0.0, 0))
            service[role] = RoleService(
                seen.count + int(totals.get("count", 0)),
                seen.total_ms + float(totals.get("total_ms", 0.0)),
                seen.steps + int(totals.get("steps", 0)),
            )
        for model, n in row.denoiser_evals.items():
            evals[model] = evals.get(model, 0) + int(n)
    return PeriodStats(since, seconds, _summary(rows), service, evals)


def recent_intervals(session: Session, limit: int) -> list[IntervalStats]:
    """The newest `limit` interval rows, newest first."""
    return list(
        session.scalars(select(IntervalStats).order_by(IntervalStats.period_start.desc()).limit(limit)).all()
    )
