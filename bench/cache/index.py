"""`reprise bench cache`: what the cache index costs in the configured Postgres + pgvector, at scale.

Fills N entries of the configured text embedder's dimension into one scope, or into S tenant scopes of
Zipf-distributed sizes plus a shared scope (bench.cache.fill), each entry with one state per capture step,
then measures, per scope-size class and over all lookups:
    lookup_p50_ms, lookup_p99_ms  wall time of db.cache.lookup, the production top-1 query with its scope
                                  and family filters (the small-scope exact path or the HNSW walk, as
                                  configured; one transaction per query, as admission runs it)
    recall_at_1                   how often that lookup returns the exact scan's nearest entry of the same
                                  scope, for near-duplicate queries (a cached embedding plus noise, cosine
                                  ~0.9)
    evict_pass_ms                 one eviction pass (jobs.passes.eviction.evict_scope, configured policy)
                                  freeing 1% of the largest scope's bytes, blob deletions included
    entries, dim                  the cache size and embedding dimension measured
    scopes, by_class              the scope count, and per class of scope size (upper bound
                                  `scope_entries`): lookups, p50, p99, recall@1
These JSON field names are a contract; further fields give the context (fill time, the index's size,
which path each lookup took, the classes short of the goals). Every bench scope is deleted afterwards,
even on failure.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import text

from bench.cache.fill import BENCH_FAMILY, BenchScope, bench_scopes, fill, near_duplicates, scope_vectors
from core.settings import Settings
from core.vocabulary import LookupMode
from db import cache, scope_bytes, scope_indexes
from db.blobs.local import LocalBlobStore
from db.engine import engine_for, session_scope
from jobs.passes.eviction import EvictionReport, evict_scope
from jobs.passes.scope_indexes import check_scope_indexes

QUERY_NOISE_COSINE = 0.9  # a query's cosine to the entry it was drawn from
CLASS_BOUNDS = (100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)  # scope sizes: classes' upper bounds
GOAL_P99_MS = 20.0  # the cache's goal: admission p99 at most 20 ms end to end
GOAL_RECALL = 0.95  # the cache's goal: lookup recall@1 at least 0.95
MISS_BELOW = 0.65  # the lowest similarity any row of the text presets reuses (NIRVANA Fig. 10: > 0.65 -> k 5)


@dataclass(frozen=True, slots=True)
class CacheBench:
    lookup_p50_ms: float
    lookup_p99_ms: float
    recall_at_1: float
    evict_pass_ms: float
    entries: int
    dim: int
    scopes: int = 1
    by_class: list[dict[str, Any]] = field(default_factory=list)
    # context
    queries: int = 0
    ef_search: int = 0
    ef_reference_entries: int = 0  # ef_search grows past this many entries in a scope's own index
    exact_max: int = 0
    max_scan_tuples: int = 0
    paths: dict[str, int] = field(default_factory=dict)
    eviction_policy: str = ""
    states_evicted: int = 0
    entries_removed: int = 0
    bytes_freed: int = 0
    fill_s: float = 0.0
    index_build_s: float = 0.0  # with bulk_build: the one HNSW build after the fill
    index_bytes: int = 0
    table_bytes: int = 0
    scope_indexes: int = 0  # scopes given an index of their own (jobs.passes.scope_indexes), after the fill
    scope_index_build_s: float = 0.0
    scope_index_bytes: int = 0
    short: list[str] = field(default_factory=list)
    compare: list[dict[str, Any]] = field(default_factory=list)  # the same fill, other exact_max values
    churn: dict[str, Any] = field(default_factory=dict)  # lookups after churn, and after the rebuild

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Probe:
    scope: BenchScope
    vector: npt.NDArray[np.float32]


def size_class(entries: int) -> int:
    return next((bound for bound in CLASS_BOUNDS if entries <= bound), CLASS_BOUNDS[-1])


def _fill_all(
    settings: Settings, scopes: list[BenchScope], queries: int, rng: np.random.Generator
) -> list[_Probe]:
    """Fill every scope; draw the probes while the scopes' vectors are at hand: queries spread evenly
    over the size classes, each at a random scope of its class and a random entry of that scope."""
    classes: dict[int, list[BenchScope]] = defaultdict(list)
    for scope in scopes:
        classes[size_class(scope.entries)].append(scope)
    per_class = max(1, queries // len(classes))
    wanted: dict[str, list[int]] = defaultdict(list)
    for members in classes.values():
        for pick in rng.integers(0, len(members), size=per_class):
            scope = members[int(pick)]
            wanted[scope.name].append(int(rng.integers(0, scope.entries)))
    probes: list[_Probe] = []
    dim = settings.text_embedding_dim
    for scope in scopes:
        rows = sorted(wanted.get(scope.name, []))
        offset = 0
        for chunk in scope_vectors(scope.entries, dim, rng):
            fill(settings, scope.name, chunk, rng)
            inside = [row - offset for row in rows if offset <= row < offset + len(chunk)]
            if inside:
                drawn = near_duplicates(chunk[inside], QUERY_NOISE_COSINE, rng)
                probes.extend(_Probe(scope, vector) for vector in drawn)
            offset += len(chunk)
    return [probes[int(index)] for index in rng.permutation(len(probes))]


TEXT_INDEX = "ix_cache_entries_text_embedding_hnsw"
TEXT_INDEX_DDL = f"CREATE INDEX {TEXT_INDEX} ON cache_entries USING hnsw (text_embedding vector_cosine_ops)"


def _bulk_build(settings: Settings) -> None:
    """For a fill of a dedicated database: drop the text HNSW index (rebuilt once after the fill, as
    pgvector recommends for bulk loads, instead of one graph insertion per row). Refused when the cache
    holds anything but bench entries."""
    with session_scope(settings) as session:
        others = session.execute(
            text("SELECT count(*) FROM cache_entries WHERE scope NOT LIKE 'bench:%'")
        ).scalar()
        if others:
            raise ValueError(
                f"--bulk-build needs a database without cache entries of its own ({others} here)"
            )
        session.execute(text(f"DROP INDEX IF EXISTS {TEXT_INDEX}"))


def _build_index(settings: Settings) -> float:
    """(Re)create the text HNSW index if it is missing; the seconds it took (0 when it was there)."""
    with (
        engine_for(settings.sqlalchemy_url).connect().execution_options(isolation_level="AUTOCOMMIT") as conn
    ):
        if conn.execute(text("SELECT to_regclass(:name)"), {"name": TEXT_INDEX}).scalar() is not None:
            return 0.0
        conn.execute(text("SET maintenance_work_mem = '2GB'"))
        conn.execute(text("SET max_parallel_maintenance_workers = 2"))
        started = time.perf_counter()
        conn.execute(text(TEXT_INDEX_DDL))
        return time.perf_counter() - started


def measure_cache(
    settings: Settings,
    *,
    entries: int,
    queries: int = 200,
    seed: int = 0,
    scopes: int = 1,
    exact_max: int | None = None,
    bulk_build: bool = False,
    compare_exact: tuple[int, ...] = (),
    compare_ef: tuple[int, ...] = (),
    churn_rounds: int = 0,
) -> CacheBench:
    """Run the benchmark against settings' database. Needs a migrated database (`reprise migrate`).
    `exact_max`: the small-scope exact path's bound (default: REPRISE_LOOKUP_EXACT_MAX; 0: never).
    `bulk_build`: fill without the text HNSW index and build it once after (a dedicated database only).
    `compare_exact`, `compare_ef`: the same fill's lookups again with other exact_max / ef_search values."""
    if entries < 1 or queries < 1 or scopes < 1:
        raise ValueError("entries, queries and scopes must be at least 1")
    rng, exact = np.random.default_rng(seed), settings.lookup_exact_max if exact_max is None else exact_max
    layout = bench_scopes(uuid.uuid4().hex[:12], entries, scopes)
    try:
        if bulk_build:
            _bulk_build(settings)
        started = time.perf_counter()
        probes = _fill_all(settings, layout, queries, rng)
        fill_s = time.perf_counter() - started
        build_s = _build_index(settings)
        indexed = check_scope_indexes(settings)  # what beat's check-indexes pass does next
        cache.analyze(settings.sqlalchemy_url)
        ef, reference = settings.hnsw_ef_search, settings.hnsw_ef_reference_entries
        rows = _time_lookups(settings, probes, exact, ef, reference)
        compare = [_variant(settings, probes, other, ef, reference) for other in compare_exact]
        compare += [_variant(settings, probes, exact, other, 0) for other in compare_ef]  # ef fixed
        churn = _churn(settings, layout[0], probes, exact, churn_rounds, rng) if churn_rounds else {}
        report, evict_ms = _time_eviction(settings, layout[0].name)
        index_bytes, table_bytes = _sizes(settings)
        by_class = _by_class(rows)
        timings = [row[1] for row in rows]
        return CacheBench(
            lookup_p50_ms=round(statistics.median(timings), 3),
            lookup_p99_ms=round(float(np.percentile(timings, 99)), 3),
            recall_at_1=round(sum(row[2] for row in rows) / len(rows), 4),
            evict_pass_ms=round(evict_ms, 3),
            entries=entries,
            dim=settings.text_embedding_dim,
            scopes=len(layout),
            by_class=by_class,
            queries=len(rows),
            ef_search=ef,
            ef_reference_entries=reference,
            exact_max=exact,
            max_scan_tuples=settings.hnsw_max_scan_tuples,
            paths=dict(Counter(row[3] for row in rows)),
            eviction_policy=settings.eviction_policy.value,
            states_evicted=report.states_evicted,
            entries_removed=report.entries_removed,
            bytes_freed=report.bytes_before - report.bytes_after,
            fill_s=round(fill_s, 2),
            index_build_s=round(build_s, 2),
            index_bytes=index_bytes,
            table_bytes=table_bytes,
            short=_short(by_class),
            compare=compare,
            churn=churn,
            scope_indexes=len(indexed.created) + indexed.kept,
            scope_index_build_s=indexed.build_s,
            scope_index_bytes=_scope_index_bytes(settings),
        )
    finally:
        with session_scope(settings) as session:
            for scope in layout:
                cache.drop_scope(session, scope.name)
        _build_index(settings)  # never leave the database without its index
        _drop_bench_scope_indexes(settings)


def _time_lookups(
    settings: Settings, probes: list[_Probe], exact_max: int, ef_search: int, ef_reference: int
) -> list[tuple[int, float, bool, str]]:
    """Per probe: its scope's size class, the lookup's ms, whether it found the exact scan's nearest
    entry, and the path it took."""
    rows: list[tuple[int, float, bool, str]] = []
    with session_scope(settings) as session:

        def production_lookup(probe: _Probe) -> cache.LookupResult | None:
            return cache.lookup(
                session,
                query_embedding=probe.vector,
                mode=LookupMode.TEXT_TO_TEXT,
                scopes=(probe.scope.name,),
                model_family=BENCH_FAMILY,
                ef_search=ef_search,
                ef_reference_entries=ef_reference,
                exact_max=exact_max,
                max_scan_tuples=settings.hnsw_max_scan_tuples,
            )

        for warm in probes[: min(10, len(probes))]:  # warm the index pages and the plan cache
            production_lookup(warm)
            session.rollback()
        for probe in probes:
            started = time.perf_counter()
            found = production_lookup(probe)
            session.commit()
            elapsed = (time.perf_counter() - started) * 1000.0
            truth = cache.lookup_exact(
                session,
                query_embedding=probe.vector,
                mode=LookupMode.TEXT_TO_TEXT,
                scopes=(probe.scope.name,),
                model_family=BENCH_FAMILY,
            )
            session.rollback()
            agree = _agree(found, truth)
            path = str(found.path) if found is not None else "none"
            rows.append((size_class(probe.scope.entries), elapsed, agree, path))
    return rows


def _agree(found: cache.LookupResult | None, truth: cache.LookupResult | None) -> bool:
    """Whether the lookup answered as the exact scan did: the same entry, or, when the exact nearest is
    below every threshold (a miss whatever entry comes back), an entry below it too. Churn deletes the
    entries some probes were drawn from; among the far entries left the nearest is a near-tie."""
    if found is None or truth is None:
        return found is truth
    both_miss = truth.similarity < MISS_BELOW and found.similarity < MISS_BELOW
    return found.entry_id == truth.entry_id or both_miss


def _churn(
    settings: Settings,
    scope: BenchScope,
    probes: list[_Probe],
    exact: int,
    rounds: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """bench.cache.churn's rounds on the largest scope, then the lookups; the index pass, then again."""
    from bench.cache.churn import churn_round, index_mib, rebuild

    before = index_mib(settings)
    for _ in range(rounds):
        churn_round(settings, scope, rng)
    ef, reference = settings.hnsw_ef_search, settings.hnsw_ef_reference_entries
    after_churn = {**_variant(settings, probes, exact, ef, reference), "index_mib": index_mib(settings)}
    health = rebuild(settings)
    after_rebuild = {**_variant(settings, probes, exact, ef, reference), "index_mib": index_mib(settings)}
    return {
        "rounds": rounds,
        "share": 0.1,
        "index_mib_before": before,
        "after_churn": after_churn,
        "index_health": health,
        "after_rebuild": after_rebuild,
    }


def _variant(
    settings: Settings, probes: list[_Probe], exact_max: int, ef_search: int, ef_reference: int
) -> dict[str, Any]:
    """The lookups again with another exact_max or ef_search (ef_reference 0: that ef for every scope,
    whatever its size): the choice, measured on one fill."""
    rows = _time_lookups(settings, probes, exact_max, ef_search, ef_reference)
    timings = [row[1] for row in rows]
    return {
        "exact_max": exact_max,
        "ef_search": ef_search,
        "ef_reference_entries": ef_reference,
        "lookup_p50_ms": round(statistics.median(timings), 3),
        "lookup_p99_ms": round(float(np.percentile(timings, 99)), 3),
        "recall_at_1": round(sum(row[2] for row in rows) / len(rows), 4),
        "by_class": _by_class(rows),
    }


def _by_class(rows: list[tuple[int, float, bool, str]]) -> list[dict[str, Any]]:
    grouped: dict[int, list[tuple[int, float, bool, str]]] = defaultdict(list)
    for row in rows:
        grouped[row[0]].append(row)
    result = []
    for bound in sorted(grouped):
        members = grouped[bound]
        timings = [row[1] for row in members]
        result.append(
            {
                "scope_entries": bound,
                "lookups": len(members),
                "lookup_p50_ms": round(statistics.median(timings), 3),
                "lookup_p99_ms": round(float(np.percentile(timings, 99)), 3),
                "recall_at_1": round(sum(row[2] for row in members) / len(members), 4),
                "paths": dict(Counter(row[3] for row in members)),
            }
        )
    return result


def _short(by_class: list[dict[str, Any]]) -> list[str]:
    """The classes that miss the goals (GOAL_RECALL, GOAL_P99_MS), said plainly."""
    short = []
    for row in by_class:
        if row["recall_at_1"] < GOAL_RECALL:
            short.append(f"scopes <= {row['scope_entries']}: recall@1 {row['recall_at_1']} < {GOAL_RECALL}")
        if row["lookup_p99_ms"] > GOAL_P99_MS:
            short.append(
                f"scopes <= {row['scope_entries']}: p99 {row['lookup_p99_ms']} ms > {GOAL_P99_MS} ms"
            )
    return short


def _sizes(settings: Settings) -> tuple[int, int]:
    """Bytes of the text-embedding HNSW index and of the cache_entries table (heap and TOAST)."""
    with session_scope(settings) as session:
        row = session.execute(
            text(
                "SELECT COALESCE((SELECT sum(pg_relation_size(indexrelid)) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'cache_entries'::regclass "
                "AND c.relname LIKE '%text_embedding%'), 0), pg_table_size('cache_entries')"
            )
        ).one()
    return int(row[0]), int(row[1])


def _scope_index_bytes(settings: Settings) -> int:
    with session_scope(settings) as session:
        return sum(index.index_bytes for index in scope_indexes.scope_indexes(session))


def _drop_bench_scope_indexes(settings: Settings) -> None:
    with session_scope(settings) as session:
        bench = [
            index.name for index in scope_indexes.scope_indexes(session) if index.scope.startswith("bench:")
        ]
    for name in bench:
        scope_indexes.drop_scope_index(settings.sqlalchemy_url, name)


def _time_eviction(settings: Settings, scope: str) -> tuple[EvictionReport, float]:
    """One eviction pass freeing 1% of the scope's bytes (blobs in a throwaway store), and its ms."""
    with session_scope(settings) as session:
        used = scope_bytes.scope_bytes(session, scope=scope)
    with tempfile.TemporaryDirectory(prefix="reprise-bench-") as blob_dir:
        started = time.perf_counter()
        report = evict_scope(
            settings,
            LocalBlobStore(Path(blob_dir)),
            scope=scope,
            budget_bytes=used - max(1, used // 100),
            headroom=0.0,
        )
        return report, (time.perf_counter() - started) * 1000.0


def format_table(result: CacheBench) -> str:
    rows = [
        (
            "entries",
            f"{result.entries} x {result.dim}-d in {result.scopes} scope(s), filled in {result.fill_s:.0f} s",
        ),
        ("lookup p50 / p99", f"{result.lookup_p50_ms:.2f} / {result.lookup_p99_ms:.2f} ms"),
        ("recall@1 (vs exact)", f"{result.recall_at_1:.3f} over {result.queries} queries {result.paths}"),
        ("eviction pass (1% of budget)", f"{result.evict_pass_ms:.1f} ms ({result.eviction_policy})"),
        ("HNSW index", f"{result.index_bytes / 2**20:.1f} MiB (table {result.table_bytes / 2**20:.1f} MiB)"),
        (
            "scope indexes",
            f"{result.scope_indexes}, {result.scope_index_bytes / 2**20:.1f} MiB, built in "
            f"{result.scope_index_build_s:.0f} s",
        ),
    ]
    rows += [
        (
            f"  scopes <= {row['scope_entries']}",
            f"{row['lookups']} lookups, p50 {row['lookup_p50_ms']:.2f} / p99 {row['lookup_p99_ms']:.2f} ms, "
            f"recall@1 {row['recall_at_1']:.3f} {row['paths']}",
        )
        for row in result.by_class
    ]
    rows += [("short of the goals", line) for line in result.short]
    rows += [
        (
            f"with exact_max {other['exact_max']}, ef {other['ef_search']}",
            f"p50 {other['lookup_p50_ms']:.2f} / p99 {other['lookup_p99_ms']:.2f} ms, "
            f"recall@1 {other['recall_at_1']:.3f}",
        )
        for other in result.compare
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
