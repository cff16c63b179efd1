"""Keeping the cache's HNSW indexes healthy under churn.

A cache deletes entries all the time (eviction), and an HNSW index keeps their tuples' space: vacuum marks
it reusable but the graph does not shrink, and a lookup walks more pages for the same answer (measured in
the README's "Admission at scale": after a fill and deletion of 100k entries, 147 MB for 469 live entries
and lookups 2.5x slower; VACUUM alone did not help, REINDEX did). This pass compares each index's size with
what a fresh build of its rows takes and rebuilds it CONCURRENTLY (lookups go on) past
REPRISE_INDEX_REBUILD_RATIO.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Final

from core.settings import Settings
from db.engine import session_scope
from db.index_health import IndexSize, index_sizes, reindex_concurrently

log = logging.getLogger(__name__)

GRAPH_BYTES_PER_ENTRY: Final = 512  # neighbour lists, tuple headers and page fill at m = 16 (pgvector's
# default): a fresh 384-d index measured 2,045 bytes per entry (`reprise bench cache`), 4 x 384 of them
# the vector itself
MIN_REBUILD_BYTES: Final = 8 * 2**20  # below this an index is a few pages: nothing worth rebuilding


@dataclass(frozen=True, slots=True)
class IndexHealth:
    index: str
    index_bytes: int
    rows: int
    fresh_bytes: int
    ratio: float
    rebuilt: bool
    rebuild_s: float | None


def fresh_bytes(rows: int, dim: int) -> int:
    """What a fresh build of `rows` vectors of `dim` floats takes, about (at least a page)."""
    return max(8192, rows * (4 * dim + GRAPH_BYTES_PER_ENTRY))


def needs_rebuild(size: IndexSize, dim: int, ratio_limit: float) -> tuple[bool, float]:
    ratio = size.index_bytes / fresh_bytes(size.rows, dim)
    return ratio > ratio_limit and size.index_bytes >= MIN_REBUILD_BYTES, ratio


def check_indexes(settings: Settings) -> list[IndexHealth]:
    """Measure each HNSW index; rebuild those past the ratio. Returns what it saw and did."""
    with session_scope(settings) as session:
        sizes = index_sizes(session)
    dims = {"text_embedding": settings.text_embedding_dim, "image_embedding": settings.image_embedding_dim}
    report = []
    for size in sizes:
        rebuild, ratio = needs_rebuild(size, dims[size.column], settings.index_rebuild_ratio)
        seconds = None
        if rebuild:
            started = time.perf_counter()
            reindex_concurrently(settings.sqlalchemy_url, size.index)
            seconds = round(time.perf_counter() - started, 2)
            log.info(
                "rebuilt %s: %.1f MiB for %d rows (%.1fx a fresh build) in %.1f s",
                *(size.index, size.index_bytes / 2**20, size.rows, ratio, seconds),
            )
        report.append(
            IndexHealth(
                size.index,
                size.index_bytes,
                size.rows,
                fresh_bytes(size.rows, dims[size.column]),
                round(ratio, 2),
                rebuild,
                seconds,
            )
        )
    return report
