"""k selection: the presets' rows and comparisons, holes, the knob, and custom tables."""

from __future__ import annotations

import pytest

from core.errors import ThresholdTableError
from jobs.policies.k_selection import MODM_T2I, NIRVANA_T2T, PRESETS, Comparison, choose_k, parse_table

ALL_KS = (5, 10, 15, 20, 25, 30)


@pytest.mark.parametrize(
    ("similarity", "k"),
    [
        (0.99, 25),
        (0.951, 25),
        (0.95, 20),  # strictly above 0.95 for 25 (Figure 10: s > 0.95)
        (0.91, 20),
        (0.90, 15),
        (0.86, 15),
        (0.85, 10),
        (0.76, 10),
        (0.75, 5),
        (0.66, 5),
        (0.65, None),
        (0.30, None),
        (-0.2, None),
    ],
)
def test_nirvana_preset_rows_are_strict(similarity: float, k: int | None) -> None:
    assert choose_k(similarity, NIRVANA_T2T, ALL_KS) == k


@pytest.mark.parametrize(
    ("similarity", "k"),
    [
        (0.35, 30),
        (0.30, 30),  # MoDM 5.2: CLIP score >= 0.30 -> 30
        (0.2999, 25),
        (0.29, 25),
        (0.285, 15),
        (0.28, 15),
        (0.27, 10),
        (0.26, 5),
        (0.25, 5),
        (0.2499, None),
    ],
)
def test_modm_preset_rows_are_inclusive(similarity: float, k: int | None) -> None:
    assert choose_k(similarity, MODM_T2I, ALL_KS) == k


def test_presets_are_found_by_name_and_parse_to_themselves() -> None:
    assert parse_table("nirvana-t2t") is NIRVANA_T2T
    assert parse_table(" modm-t2i ") is MODM_T2I
    assert set(PRESETS) == {
        "nirvana-t2t",
        "modm-t2i",
        "lab-minilm",
        "lab-minilm-large",
        "lab-minilm-refine",
        "lab-t2i",
    }
    for table in PRESETS.values():
        again = parse_table(table.describe())
        assert again.rows == table.rows
        assert again.comparison is table.comparison


def test_lowest_similarity_is_the_hit_boundary() -> None:
    assert NIRVANA_T2T.lowest_similarity == 0.65
    assert not NIRVANA_T2T.is_match(0.65)
    assert NIRVANA_T2T.is_match(0.6501)
    assert MODM_T2I.is_match(0.25)


def test_hole_falls_back_to_the_largest_stored_k_below() -> None:
    # NIRVANA 5.4: "it can use K=10, if a hole is at K=15"
    assert choose_k(0.87, NIRVANA_T2T, (5, 10, 20, 25)) == 10
    assert choose_k(0.97, NIRVANA_T2T, (5, 15)) == 15
    assert choose_k(0.97, NIRVANA_T2T, (25,)) == 25


def test_only_holes_at_or_below_the_chosen_k_is_a_miss() -> None:
    assert choose_k(0.87, NIRVANA_T2T, (20, 25)) is None
    assert choose_k(0.87, NIRVANA_T2T, ()) is None


def test_stored_ks_none_means_any_k_can_be_served() -> None:
    assert choose_k(0.87, NIRVANA_T2T, None) == 15
    assert choose_k(0.31, MODM_T2I, None) == 30


def test_positive_knob_picks_larger_k_and_stops_at_the_top_row() -> None:
    assert choose_k(0.87, NIRVANA_T2T, ALL_KS, knob=1) == 20
    assert choose_k(0.87, NIRVANA_T2T, ALL_KS, knob=2) == 25
    assert choose_k(0.87, NIRVANA_T2T, ALL_KS, knob=3) == 25


def test_negative_knob_picks_smaller_k_and_past_the_last_row_misses() -> None:
    assert choose_k(0.87, NIRVANA_T2T, ALL_KS, knob=-1) == 10
    assert choose_k(0.96, NIRVANA_T2T, ALL_KS, knob=-2) == 15
    assert choose_k(0.70, NIRVANA_T2T, ALL_KS, knob=-1) is None


def test_knob_never_turns_a_miss_into_a_hit() -> None:
    assert choose_k(0.64, NIRVANA_T2T, ALL_KS, knob=3) is None
    assert choose_k(0.20, MODM_T2I, None, knob=3) is None


def test_knob_then_holes() -> None:
    # knob +1 moves 15 -> 20; 20 is a hole, so the largest stored k below it serves.
    assert choose_k(0.87, NIRVANA_T2T, (5, 15), knob=1) == 15


def test_custom_table_defaults_to_strict_and_sorts_rows() -> None:
    table = parse_table("0.8:10, 0.95:25,0.9:20")
    assert table.comparison is Comparison.GREATER
    assert table.ks == (25, 20, 10)
    assert choose_k(0.95, table, None) == 20
    assert choose_k(0.9501, table, None) == 25
    assert choose_k(0.8, table, None) is None


def test_custom_table_inclusive() -> None:
    table = parse_table(">=0.3:30,>=0.29:25")
    assert table.comparison is Comparison.GREATER_EQUAL
    assert choose_k(0.29, table, None) == 25


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty threshold table"),
        ("nirvana", "row 1 'nirvana' is not 'similarity:k'"),
        ("0.9", "is not 'similarity:k'"),
        ("0.9:20:3", "is not 'similarity:k'"),
        ("x:20", "similarity 'x' is not a number"),
        ("0.9:twenty", "k 'twenty' is not an integer"),
        ("0.9:0", "must be a positive integer"),
        ("1.5:5", r"must be in \[-1, 1\]"),
        ("nan:5", r"must be in \[-1, 1\]"),
        ("0.9:20,0.9:25", "lists a similarity twice"),
        ("0.95:10,0.9:20", "a higher similarity must allow a larger k"),
        ("0.95:20,0.9:20", "a higher similarity must allow a larger k"),
        (">=0.95:25,0.9:20", "mixes '>' and '>='"),
    ],
)
def test_custom_table_errors_name_the_fault(spec: str, message: str) -> None:
    with pytest.raises(ThresholdTableError, match=message):
        parse_table(spec)


def test_table_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_table("0.9:-1")
