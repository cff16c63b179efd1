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
from typing import Protocol

from core.errors import ThresholdTableError
from core.vocabulary import LAB_ATTRIBUTES, MINILM_KINDS, LookupMode, TextEmbedderKind


class SettingsLike(Protocol):
    """What table selection reads of core.settings.Settings."""

    k_table: str
    lookup_mode: LookupMode
    text_embedder: TextEmbedderKind
    open_clip_model: str | None

    def model_source(self, role: str) -> str: ...


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
    mode: LookupMode | None = None  # the lookup it was profiled for; None: unknown (a custom table)
    profiled_with: str | None = None  # the embedder it was profiled for (embedder_tag); None: unknown

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


CLIP_VIT_L_14 = "open_clip:ViT-L-14"
MINILM = "minilm:all-MiniLM-L6-v2"


def _rows(*pairs: tuple[float, int]) -> tuple[ThresholdRow, ...]:
    return tuple(ThresholdRow(similarity, k) for similarity, k in pairs)


NIRVANA_T2T = ThresholdTable(
    name="nirvana-t2t",
    rows=_rows((0.95, 25), (0.90, 20), (0.85, 15), (0.75, 10), (0.65, 5)),
    comparison=Comparison.GREATER,
    source="NIRVANA 5.3.1, Figure 10 (CLIP text-to-text similarity, alpha = 0.9), as reimplemented "
    "by the MoDM authors (MoDM 5.2 quotes NIRVANA's 0.65-0.95 thresholds)",
    mode=LookupMode.TEXT_TO_TEXT,
    profiled_with=CLIP_VIT_L_14,  # NIRVANA 5.1: 768-d CLIP text embeddings
)

MODM_T2I = ThresholdTable(
    name="modm-t2i",
    rows=_rows((0.30, 30), (0.29, 25), (0.28, 15), (0.27, 10), (0.25, 5)),
    comparison=Comparison.GREATER_EQUAL,
    source="MoDM 5.2, Figure 5b (CLIP score / 100, text-to-image similarity, alpha = 0.95)",
    mode=LookupMode.TEXT_TO_IMAGE,
    profiled_with=CLIP_VIT_L_14,  # MoDM 5.2: CLIPScore, the CLIP ViT-L/14 text and image towers
)

# The quality lab's tables, each copied from the profile JSON it names (a test compares them).
LAB_MINILM = ThresholdTable(
    name="lab-minilm",
    rows=_rows((0.826, 25), (0.821, 20), (0.816, 15)),
    comparison=Comparison.GREATER,
    source="`reprise profile k` on the quality lab (lab/profiles/resume-small.json: 200 pairs, tolerance "
    "0.12, judge quality): hits resume on the distilled lab:small from lab:large's latents (MoDM's route); "
    "no k holds a drop under 0.09 there, the small model's own gap to the large",
    mode=LookupMode.TEXT_TO_TEXT,
    profiled_with=MINILM,
)

LAB_MINILM_LARGE = ThresholdTable(
    name="lab-minilm-large",
    rows=_rows((0.821, 10), (0.816, 5)),
    comparison=Comparison.GREATER,
    source="`reprise profile k` on the quality lab (lab/profiles/resume-large.json: 200 pairs, tolerance "
    "0.02, judge quality): hits resume on lab:large (NIRVANA's single-model serving)",
    mode=LookupMode.TEXT_TO_TEXT,
    profiled_with=MINILM,
)

LAB_MINILM_REFINE = ThresholdTable(
    name="lab-minilm-refine",
    rows=_rows((0.5, 25)),
    comparison=Comparison.GREATER,
    source="`reprise profile k` on the quality lab (lab/profiles/refine-small.json: 200 pairs, tolerance "
    "0.15, judge quality): hits refine lab:large's final latent on lab:small (MoDM 5.1), text lookups",
    mode=LookupMode.TEXT_TO_TEXT,
    profiled_with=MINILM,
)


LAB_T2I = ThresholdTable(
    name="lab-t2i",
    rows=_rows((0.85, 45)),
    comparison=Comparison.GREATER,
    source="`reprise profile k --mode image --hit refine` on the quality lab "
    "(lab/profiles/image-refine-small.json: 240 pairs, judge quality): hits refine lab:large's final "
    "latent on the distilled lab:small (MoDM 5.1) after a text-to-image lookup in the lab's attribute "
    "space; the 41 profiled pairs above 0.85 gain 0.034 on the mean at k = 45 (a cached image that shows "
    "every asked attribute, kept), while the 34 from 0.8 to 0.85, one attribute apart, lose 0.10 to 0.13 "
    "at every k, and all below lose 0.04 or more",
    mode=LookupMode.TEXT_TO_IMAGE,
    profiled_with=LAB_ATTRIBUTES,
)


PRESETS: Mapping[str, ThresholdTable] = MappingProxyType(
    {t.name: t for t in (NIRVANA_T2T, MODM_T2I, LAB_MINILM, LAB_MINILM_LARGE, LAB_MINILM_REFINE, LAB_T2I)}
)
# `auto` on the lab's models, by the space its lookups embed in (embedder_tag): the table profiled there
LAB_PRESET_FOR_SPACE: Mapping[str, ThresholdTable] = MappingProxyType(
    {MINILM: LAB_MINILM, LAB_ATTRIBUTES: LAB_T2I}
)

AUTO = "auto"  # Settings.k_table's default: the preset profiled for the configured lookup mode
PRESET_FOR_MODE: Mapping[LookupMode, ThresholdTable] = MappingProxyType(
    {LookupMode.TEXT_TO_TEXT: NIRVANA_T2T, LookupMode.TEXT_TO_IMAGE: MODM_T2I}
)

# Where the similarities of related pairs lie in each lookup mode, so a table outside them is refused:
# text-to-text cosines of paraphrases and near-duplicates lie in 0.65-0.95 (NIRVANA Figure 10), and
# unrelated prompts reach 0.3-0.4 with sentence embedders; CLIP text-to-image cosines of matching
# pairs lie in 0.25-0.35 (MoDM 5.2, Figure 5b) and rarely pass 0.4.
PLAUSIBLE_FLOOR: Mapping[LookupMode, tuple[float, float]] = MappingProxyType(
    {LookupMode.TEXT_TO_TEXT: (0.4, 0.99), LookupMode.TEXT_TO_IMAGE: (0.1, 0.45)}
)
# In the lab's attribute space a cosine is about the share of the prompt's attributes an image shows:
# a hit below half of them is an unrelated image, and a full match reaches 1.
ATTRIBUTE_SHARE_FLOOR: tuple[float, float] = (0.5, 1.0)


def table_for(spec: str, mode: LookupMode, *, space: str | None = None, lab: bool = False) -> ThresholdTable:
    """The table a deployment uses: `spec` (Settings.k_table) read for the lookup mode.

    'auto' is the mode's own preset (nirvana-t2t for text, modm-t2i for image), or, on the quality
    lab's models (`lab`), the table profiled on them in the space their lookups embed in (`space`, an
    embedder_tag: lab-minilm for MiniLM text lookups, lab-t2i for the lab's attribute space). A preset
    profiled for the other mode, or a custom table whose lowest row no related pair of the mode would
    pass (or every unrelated one would), is refused with the fix: similarities of the two modes live on
    different scales, so such a table either never hits or serves unrelated images.
    """
    if spec.strip() == AUTO:
        lab_table = LAB_PRESET_FOR_SPACE.get(space or "") if lab else None
        return lab_table if lab_table is not None and lab_table.mode is mode else PRESET_FOR_MODE[mode]
    table = parse_table(spec)
    if table.mode is not None and table.mode is not mode:
        raise ThresholdTableError(
            f"threshold table {table.name!r} was profiled for {table.mode.value} lookups, but "
            f"REPRISE_LOOKUP_MODE={mode.value}: set REPRISE_K_TABLE=auto (or {PRESET_FOR_MODE[mode].name})"
        )
    attributes = LAB_ATTRIBUTES in (space, table.profiled_with) and mode is LookupMode.TEXT_TO_IMAGE
    low, high = ATTRIBUTE_SHARE_FLOOR if attributes else PLAUSIBLE_FLOOR[mode]
    if not low <= table.lowest_similarity <= high:
        raise ThresholdTableError(
            f"threshold table {table.name!r}: its lowest row ({table.lowest_similarity:g}) is implausible "
            f"for {mode.value} lookups, whose hits need a floor in [{low:g}, {high:g}]; set "
            f"REPRISE_K_TABLE=auto (or {PRESET_FOR_MODE[mode].name}), or a table profiled for this mode"
        )
    return table


def embedder_tag(kind: TextEmbedderKind, open_clip_model: str | None, mode: LookupMode) -> str:
    """Names the embedder a lookup in `mode` runs with, in the form ThresholdTable.profiled_with uses.
    Image lookups always embed the prompt with open_clip; text lookups with the text embedder."""
    if mode is LookupMode.TEXT_TO_TEXT and kind in MINILM_KINDS:
        return MINILM
    if open_clip_model == LAB_ATTRIBUTES:
        return LAB_ATTRIBUTES
    return f"open_clip:{open_clip_model or 'tiny-random'}"


def embedder_mismatch(table: ThresholdTable, embedder: str) -> str | None:
    """A warning when the table was profiled for another embedder than the one in use (or for an
    unknown one): its similarities may mean other k's. None when they agree."""
    if table.profiled_with == embedder:
        return None
    profiled = table.profiled_with or "an unknown embedder"
    return (
        f"threshold table {table.name!r} was profiled with {profiled}, but lookups embed with {embedder}: "
        "its similarity thresholds may not keep quality. Profile a table for this embedder (NIRVANA "
        "Algorithm 1; the quality lab's `reprise profile k`) and set REPRISE_K_TABLE to it, or "
        "set REPRISE_K_TABLE_PROFILED_WITH when a custom table was profiled for this embedder."
    )


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


def configured_table(settings: SettingsLike) -> ThresholdTable:
    """The table the configuration names (Settings.k_table read for Settings.lookup_mode; see table_for)."""
    on_lab = settings.model_source("large").startswith("lab:")
    space = embedder_tag(settings.text_embedder, settings.open_clip_model, settings.lookup_mode)
    return table_for(settings.k_table, settings.lookup_mode, space=space, lab=on_lab)
