"""Lookup index: how the nearest cached entry is found in pgvector at scale: exact search for small
scopes, HNSW indexes (shared and per scope) for large ones, and their upkeep."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class LookupSettings(BaseSettings):
    """Lookup index: exact search, HNSW search parameters, per-scope indexes and index upkeep.

    Defaults come from `reprise bench cache` at up to a million entries over a thousand scopes
    (README, 'Admission at scale').
    """

    hnsw_ef_search: int = Field(
        80,
        ge=1,
        le=1000,
        description="pgvector hnsw.ef_search for the index path (pgvector's default is 40). `reprise bench "
        "cache --entries 100000 --compare-ef 80 --compare-ef 160` at 1, 101 and 1001 scopes: recall@1 "
        "0.950 to 0.994 at 40, 0.992 to 1.000 at 80, 0.998 to 1.000 at 160, p50 +0.3 to 1 ms per "
        "doubling (README, 'Admission at scale').",
    )
    hnsw_ef_reference_entries: int = Field(
        100_000,
        ge=0,
        description="A scope whose own HNSW index holds more entries than this walks it with ef_search "
        "grown in proportion (hnsw_ef_search x entries / this, at most 1000; db.lookup_path.scaled_ef): "
        "recall@1 at ef_search 80 was 0.998 in one scope of 100k entries, 0.930 at 300k (0.970 at ef 160, "
        "0.997 at 320) and 0.696 at 1M (`reprise bench cache --entries N --scopes 1 --compare-ef ...`, "
        "README 'Admission at scale'). 0: hnsw_ef_search whatever the size.",
    )
    lookup_exact_max: int = Field(
        2000,
        ge=0,
        description="Scopes holding at most this many live entries are searched exactly (their rows by "
        "the scope index, sorted by distance) instead of through the HNSW index: a filtered HNSW walk "
        "over a table where the scope is a small share can return nothing (pgvector 0.8's iterative "
        "scan gives up after max_scan_tuples). 0: always the index. Chosen by `reprise bench cache` "
        "(README, 'Admission at scale').",
    )
    scope_index_min_entries: int = Field(
        2000,
        ge=0,
        description="A scope holding at least this many live entries gets an HNSW index of its own (a "
        "partial index built CONCURRENTLY by beat's check-indexes pass; dropped below half): at 1M "
        "entries over 1001 scopes the shared index's filtered walk found the nearest entry of scopes of "
        "2k to 100k entries 0.54 to 0.90 of the time (ef_search 40 to 160; README, 'Admission at "
        "scale'). The default is lookup_exact_max's: every scope is searched exactly or by an index of "
        "its own. 0: none.",
    )
    hnsw_max_scan_tuples: int = Field(
        20000,
        ge=1,
        description="pgvector 0.8's hnsw.max_scan_tuples for the iterative index scan of larger scopes "
        "(pgvector's default: 20,000).",
    )
    index_rebuild_ratio: float = Field(
        2.0,
        gt=1.0,
        description="Rebuild an HNSW index of the cache (REINDEX CONCURRENTLY, lookups go on) once it "
        "takes more than this many times a fresh build of its rows: deleted entries' tuples stay in the "
        "graph and slow every walk (README, 'Admission at scale').",
    )
    index_check_period_s: float = Field(
        600.0,
        gt=0,
        description="How often beat measures the cache's HNSW indexes (jobs.passes.index_health).",
    )
