"""`reprise bench cache`: what the cache index costs in the configured Postgres + pgvector.

Fills a dedicated scope ("bench:<uuid>", never a tenant's) with N entries of the configured text
embedder's dimension, each with one state per capture step, then measures:
    lookup_p50_ms, lookup_p99_ms  wall time of db.cache.lookup, the production top-1 query through
                                  the HNSW index with its scope and family filters (one transaction
                                  per query, as admission runs it)
    recall_at_1                   how often that lookup returns the exact scan's nearest entry, for
                                  near-duplicate queries (a cached embedding plus noise, cosine ~0.9)
    evict_pass_ms                 one eviction pass (jobs.passes.eviction.evict_scope, configured policy) that
                                  frees 1% of the scope's bytes, blob deletions included
    entries, dim                  the cache size and embedding dimension measured
These JSON field names are a contract; further fields give the context. Embeddings are synthetic
unit vectors in clusters (prompts iterate on each other, DiffusionDB README), so the index sees
neighbourhoods rather than uniform noise. The scope is deleted afterwards, even on failure.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.settings import Settings
from core.vocabulary import EntryState, LookupMode
from db import cache
from db.blobs import keys
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from jobs.passes.eviction import EvictionReport, evict_scope

BENCH_FAMILY = "bench"
STATE_BYTES = 4 * 64 * 64 * 2  # one SD-1.5 latent at 512 px in float16: 32 KiB
CLUSTER_SIZE = 20  # entries per neighbourhood of near-duplicate prompts
QUERY_NOISE_COSINE = 0.9  # a query's cosine to the entry it was drawn from
_BATCH = 500


@dataclass(frozen=True, slots=True)
class CacheBench:
    lookup_p50_ms: float
    lookup_p99_ms: float
    recall_at_1: float
    evict_pass_ms: float
    entries: int
    dim: int
    # context
    queries: int
    ef_search: int
    eviction_policy: str
    states_evicted: int
    entries_removed: int
    bytes_freed: int
    fill_s: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _unit(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    return np.asarray(matrix / np.linalg.norm(matrix, axis=1, keepdims=True), dtype=np.float32)


def synthetic_embeddings(n: int, dim: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """n unit vectors in clusters of about CLUSTER_SIZE around random centres (cosine ~0.8 within)."""
    centres = _unit(rng.normal(size=(max(1, n // CLUSTER_SIZE), dim)))
    members = centres[rng.integers(0, len(centres), size=n)]
    spread = _unit(rng.normal(size=(n, dim)))
    return _unit(0.9 * members + 0.45 * spread)


def near_duplicates(
    points: npt.NDArray[np.float32], cosine: float, rng: np.random.Generator
) -> npt.NDArray[np.float32]:
    """For each point, a unit vector at `cosine` from it."""
    noise = rng.normal(size=points.shape)
    noise -= (noise * points).sum(axis=1, keepdims=True) * points
    return _unit(cosine * points + np.sqrt(1 - cosine**2) * _unit(noise))


def _fill(settings: Settings, scope: str, vectors: npt.NDArray[np.float32], rng: np.random.Generator) -> None:
    ks = settings.capture_steps
    for start in range(0, len(vectors), _BATCH):
        ids = [uuid.uuid4() for _ in vectors[start : start + _BATCH]]
        entry_rows = [
            {
                "id": entry_id,
                "scope": scope,
                "model_family": BENCH_FAMILY,
                "prompt": "bench",
                "text_embedding": vector,
                "final_latent_key": keys.final_latent_key(entry_id),
                "bytes": STATE_BYTES,
                "steps": settings.steps,
                "access_count": int(rng.integers(0, 50)),
                "state": EntryState.LIVE.value,
            }
            for entry_id, vector in zip(ids, vectors[start : start + _BATCH], strict=True)
        ]
        state_rows = [
            {
                "entry_id": entry_id,
                "k": k,
                "blob_key": keys.state_key(entry_id, k),
                "bytes": STATE_BYTES,
                "access_count": int(rng.integers(0, 20)),
            }
            for entry_id in ids
            for k in ks
        ]
        with session_scope(settings) as session:
            cache.bulk_insert(session, entry_rows, state_rows)


def _analyze(settings: Settings) -> None:
    """Refresh planner statistics, as autovacuum would after a bulk load: with stale estimates the
    planner takes the scope index and sorts every entry by distance instead of walking the HNSW index."""
    cache.analyze(settings.sqlalchemy_url)


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def measure_cache(settings: Settings, *, entries: int, queries: int = 200, seed: int = 0) -> CacheBench:
    """Run the benchmark against settings' database. Needs a migrated database (`reprise migrate`)."""
    if entries < 1 or queries < 1:
        raise ValueError("entries and queries must be at least 1")
    rng = np.random.default_rng(seed)
    dim = settings.text_embedding_dim
    scope = f"bench:{uuid.uuid4().hex}"
    vectors = synthetic_embeddings(entries, dim, rng)
    picks = rng.integers(0, entries, size=queries)
    probes = near_duplicates(vectors[picks], QUERY_NOISE_COSINE, rng)
    try:
        started = time.perf_counter()
        _fill(settings, scope, vectors, rng)
        fill_s = time.perf_counter() - started
        _analyze(settings)
        timings, agree = _time_lookups(settings, scope, probes)
        report, evict_ms = _time_eviction(settings, scope)
        return CacheBench(
            lookup_p50_ms=round(statistics.median(timings), 3),
            lookup_p99_ms=round(_percentile(timings, 99), 3),
            recall_at_1=agree / queries,
            evict_pass_ms=round(evict_ms, 3),
            entries=entries,
            dim=dim,
            queries=queries,
            ef_search=settings.hnsw_ef_search,
            eviction_policy=settings.eviction_policy.value,
            states_evicted=report.states_evicted,
            entries_removed=report.entries_removed,
            bytes_freed=report.bytes_before - report.bytes_after,
            fill_s=round(fill_s, 2),
        )
    finally:
        with session_scope(settings) as session:
            cache.drop_scope(session, scope)


def _time_lookups(settings: Settings, scope: str, probes: npt.NDArray[np.float32]) -> tuple[list[float], int]:
    """Each probe's lookup time in ms (the production HNSW query, one transaction each), and how
    many found the exact scan's nearest entry."""
    timings: list[float] = []
    agree = 0
    with session_scope(settings) as session:

        def production_lookup(query: npt.NDArray[np.float32]) -> cache.LookupResult | None:
            return cache.lookup(
                session,
                query_embedding=query,
                mode=LookupMode.TEXT_TO_TEXT,
                scopes=(scope,),
                model_family=BENCH_FAMILY,
                ef_search=settings.hnsw_ef_search,
            )

        for warm in probes[: min(10, len(probes))]:  # warm the index pages and the plan cache
            production_lookup(warm)
            session.rollback()
        for probe in probes:
            started = time.perf_counter()
            found = production_lookup(probe)
            session.commit()
            timings.append((time.perf_counter() - started) * 1000.0)
            exact = cache.lookup_exact(
                session,
                query_embedding=probe,
                mode=LookupMode.TEXT_TO_TEXT,
                scopes=(scope,),
                model_family=BENCH_FAMILY,
            )
            session.rollback()
            agree += int(found is not None and exact is not None and found.entry_id == exact.entry_id)
    return timings, agree


def _time_eviction(settings: Settings, scope: str) -> tuple[EvictionReport, float]:
    """One eviction pass freeing 1% of the scope's bytes (blobs in a throwaway store), and its ms."""
    with session_scope(settings) as session:
        used = cache.scope_bytes(session, scope=scope)
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
        ("entries", f"{result.entries} x {result.dim}-d"),
        ("lookup p50 / p99", f"{result.lookup_p50_ms:.2f} / {result.lookup_p99_ms:.2f} ms"),
        ("recall@1 (HNSW vs exact)", f"{result.recall_at_1:.3f} over {result.queries} queries"),
        ("eviction pass (1% of budget)", f"{result.evict_pass_ms:.1f} ms ({result.eviction_policy})"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
