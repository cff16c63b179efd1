"""db.lookup_path's pure part: ef_search by an index's size."""

from __future__ import annotations

import pytest

from db.lookup_path import EF_SEARCH_MAX, scaled_ef


@pytest.mark.parametrize(
    ("entries", "reference", "expected"),
    [
        (50_000, 100_000, 80),  # at or below the reference: the base ef
        (100_000, 100_000, 80),
        (300_000, 100_000, 240),  # in proportion past it
        (1_000_000, 100_000, 800),
        (1_000_001, 100_000, 801),  # rounded up
        (5_000_000, 100_000, EF_SEARCH_MAX),  # capped at pgvector's maximum
        (1_000_000, 0, 80),  # 0: fixed
        (-1, 100_000, 80),  # a never-counted index (reltuples -1)
    ],
)
def test_scaled_ef(entries: float, reference: int, expected: int) -> None:
    assert scaled_ef(80, entries, reference) == expected
