"""Choosing k, the number of denoising steps a cache hit skips, from a similarity score.

A `ThresholdTable` is the inverse map that NIRVANA's offline profiling (Algorithm 1) produces:
ordered rows "similarity above s -> k", the highest similarity first. `choose_k` reads it for
one lookup result, applies the quality/savings knob, and falls back over holes (states that
eviction removed) to the largest stored k not above the chosen one (NIRVANA 5.4).

The table is configuration (`Settings.k_table`): a preset name from `PRESETS`, or a custom
table 'sim:k,sim:k,...' parsed by `parse_table`. A custom row may start with '>' (the
default) or '>=' to pick the comparison; all rows of one table use the same one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from core.errors import ThresholdTableError


class Comparison(StrEnum):
    """How a similarity is compared with a row's threshold."""

    GREATER = ">"
    GREATER_EQUAL = ">="

    def holds(self, similarity: float, threshold: float) -> bool:
        if self is Comparison.GREATER:
            return similarity > threshold
        return similarity >= threshold


@dataclass(frozen=True, slots=True)
class ThresholdRow:
    """A similarity passing `similarity` (under the table's comparison) allows skipping k steps."""

    similarity: float
    k: int


@dataclass(frozen=True, slots=True)
class ThresholdTable:
    """Rows ordered by similarity, highest first; k strictly decreases down the table.

    Contract (checked on construction): at least one row; similarities finite, in [-1, 1] and
    distinct; every k a positive integer; a higher similarity never allows a smaller k.
    """

    name: str
    rows: tuple[ThresholdRow, ...]
    comparison: Comparison
    source: str

    def __post_init__(self) -> None:
        if not self.rows:
            raise ThresholdTableError(f"threshold table {self.name!r} has no rows")
        for row in self.rows:
            if not math.isfinite(row.similarity) or not -1.0 <= row.similarity <= 1.0:
                raise ThresholdTableError(
                    f"threshold table {self.name!r}: similarity {row.similarity} must be in [-1, 1]"
                )
            if isinstance(row.k, bool) or not isinstance(row.k, int) or row.k < 1:
                raise ThresholdTableError(
                    f"threshold table {self.name!r}: k {row.k!r} must be a positive integer"
                )
        for upper, lower in zip(self.rows, self.rows[1:], strict=False):
            if not upper.similarity > lower.similarity:
                raise ThresholdTableError(
                    f"threshold table {self.name!r}: similarities must be distinct and listed highest first "
                    f"({upper.similarity} then {lower.similarity})"
                )
            if not upper.k > lower.k:
                raise ThresholdTableError(
                    f"threshold table {self.name!r}: a higher similarity must allow a larger k "
                    f"({upper.similarity}:{upper.k} above {lower.similarity}:{lower.k})"
                )

    @property
    def lowest_similarity(self) -> float:
        """The similarity a match must pass to be a hit at all (the last row's threshold)."""
        return self.rows[-1].similarity

    @property
    def ks(self) -> tuple[int, ...]:
        """The k values the table can choose, largest first."""
        return tuple(row.k for row in self.rows)

    def row_index(self, similarity: float) -> int | None:
        """Index of the first (highest) row that `similarity` passes; None below every row."""
        for index, row in enumerate(self.rows):
            if self.comparison.holds(similarity, row.similarity):
                return index
        return None

    def is_match(self, similarity: float) -> bool:
        """Whether `similarity` passes the lowest row: a hit before knob and holes."""
        return self.row_index(similarity) is not None

    def describe(self) -> str:
        """The table as configuration text, e.g. '>0.95:25,>0.9:20'."""
        return ",".join(f"{self.comparison.value}{row.similarity:g}:{row.k}" for row in self.rows)


def _rows(*pairs: tuple[float, int]) -> tuple[ThresholdRow, ...]:
    return tuple(ThresholdRow(similarity, k) for similarity, k in pairs)


NIRVANA_T2T = ThresholdTable(
    name="nirvana-t2t",
    rows=_rows((0.95, 25), (0.90, 20), (0.85, 15), (0.75, 10), (0.65, 5)),
    comparison=Comparison.GREATER,
    source="NIRVANA 5.3.1, Figure 10 (CLIP text-to-text similarity, alpha = 0.9), as reimplemented "
    "by the MoDM authors (MoDM 5.2 quotes NIRVANA's 0.65-0.95 thresholds)",
)

MODM_T2I = ThresholdTable(
    name="modm-t2i",
    rows=_rows((0.30, 30), (0.29, 25), (0.28, 15), (0.27, 10), (0.25, 5)),
    comparison=Comparison.GREATER_EQUAL,
    source="MoDM 5.2, Figure 5b (CLIP score / 100, text-to-image similarity, alpha = 0.95)",
)

PRESETS: Mapping[str, ThresholdTable] = MappingProxyType({t.name: t for t in (NIRVANA_T2T, MODM_T2I)})


def parse_table(spec: str) -> ThresholdTable:
    """A preset by name, or a custom table such as '0.95:25,0.9:20' or '>=0.3:30,>=0.29:25'.

    Rows may come in any order; a row without '>' or '>=' uses '>'; mixing the two is refused.
    Raises ThresholdTableError naming the row at fault and the expected form.
    """
    text = spec.strip()
    if text in PRESETS:
        return PRESETS[text]
    if not text:
        raise ThresholdTableError(
            f"empty threshold table: use a preset ({', '.join(PRESETS)}) or 'sim:k,...' e.g. '0.95:25,0.9:20'"
        )
    comparisons: set[Comparison] = set()
    pairs: list[tuple[float, int]] = []
    for number, raw in enumerate(text.split(","), start=1):
        part = raw.strip()
        comparison = Comparison.GREATER
        for candidate in (Comparison.GREATER_EQUAL, Comparison.GREATER):
            if part.startswith(candidate.value):
                comparison, part = candidate, part.removeprefix(candidate.value).strip()
                break
        comparisons.add(comparison)
        sim_text, sep, k_text = part.partition(":")
        if not sep or ":" in k_text:
            raise ThresholdTableError(
                f"threshold table row {number} {raw.strip()!r} is not 'similarity:k' (e.g. '0.95:25'); "
                f"presets: {', '.join(PRESETS)}"
            )
        try:
            similarity = float(sim_text)
        except ValueError:
            raise ThresholdTableError(
                f"threshold table row {number} {raw.strip()!r}: "
                f"similarity {sim_text.strip()!r} is not a number"
            ) from None
        try:
            k = int(k_text)
        except ValueError:
            raise ThresholdTableError(
                f"threshold table row {number} {raw.strip()!r}: k {k_text.strip()!r} is not an integer"
            ) from None
        pairs.append((similarity, k))
    if len(comparisons) > 1:
        raise ThresholdTableError(
            f"threshold table {text!r} mixes '>' and '>=': use one comparison for all rows"
        )
    if len({similarity for similarity, _ in pairs}) != len(pairs):
        raise ThresholdTableError(f"threshold table {text!r} lists a similarity twice")
    pairs.sort(key=lambda pair: pair[0], reverse=True)
    return ThresholdTable(
        name=text, rows=_rows(*pairs), comparison=comparisons.pop(), source="custom (configured)"
    )


def choose_k(
    similarity: float,
    table: ThresholdTable,
    stored_ks: Collection[int] | None,
    knob: int = 0,
) -> int | None:
    """How many steps the hit skips, or None for a miss.

    1. The table's highest row that `similarity` passes gives the profiled k (NIRVANA 5.3.1).
       Below every row: a miss, whatever the knob.
    2. The quality/savings knob moves that choice `knob` rows along the table (NIRVANA 5.3.1,
       "the cache-selector heuristic can be biased to select higher values of K"):
       knob > 0 is more aggressive (rows towards larger k, stopping at the top row);
       knob < 0 is more conservative (rows towards smaller k; moving past the last row is a miss).
       The knob never turns a similarity below the table into a hit: a positive knob trades
       quality for savings on matches, it does not serve unrelated cached items.
    3. Holes (NIRVANA 5.4 "Handling of holes"): the state at the chosen k may have been evicted;
       use the largest stored k not above it; if none is left, a miss. `stored_ks=None` means any
       k can be served (MoDM 5.2: a cached final latent is noised to any step), so no fallback.
    """
    index = table.row_index(similarity)
    if index is None:
        return None
    shifted = max(0, index - knob)
    if shifted >= len(table.rows):
        return None
    chosen = table.rows[shifted].k
    return chosen if stored_ks is None else largest_stored_at_most(chosen, stored_ks)


def largest_stored_at_most(k: int, stored_ks: Collection[int]) -> int | None:
    """Holes (NIRVANA 5.4): the largest stored k not above k, or None when none is left (a miss)."""
    usable = [stored for stored in stored_ks if stored <= k]
    return max(usable) if usable else None
