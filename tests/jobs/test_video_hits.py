"""FlexCache's video hit decision (4.2.1) on NIRVANA's table, holes, the knob, and insertion (4.2.4)."""

from __future__ import annotations

import uuid

import pytest

from jobs.policies.k_selection import NIRVANA_T2T
from jobs.policies.video_hits import HitKind, Match, VideoHit, choose_video_hit, states_to_save

ALL_KS = (5, 10, 15, 20, 25)
WHOLE_ID, OBJECT_ID, BACKGROUND_ID = (uuid.UUID(int=n) for n in (1, 2, 3))


def whole(similarity: float, ks: tuple[int, ...] = ALL_KS) -> Match:
    return Match(WHOLE_ID, similarity, ks)


def obj(similarity: float, ks: tuple[int, ...] = ALL_KS, entry: uuid.UUID = OBJECT_ID) -> Match:
    return Match(entry, similarity, ks)


def background(similarity: float, ks: tuple[int, ...] = ALL_KS, entry: uuid.UUID = BACKGROUND_ID) -> Match:
    return Match(entry, similarity, ks)


def test_whole_only() -> None:
    hit = choose_video_hit(whole(0.91), None, None, NIRVANA_T2T)
    assert hit == VideoHit(HitKind.WHOLE, (WHOLE_ID,), 0.91, 20, HitKind.WHOLE)
    assert hit.object_entry == hit.background_entry == WHOLE_ID


def test_decoupled_beats_whole_when_its_min_is_higher() -> None:
    hit = choose_video_hit(whole(0.70), obj(0.96), background(0.88), NIRVANA_T2T)
    assert hit == VideoHit(HitKind.DECOUPLED, (OBJECT_ID, BACKGROUND_ID), 0.88, 15, HitKind.DECOUPLED)
    assert (hit.object_entry, hit.background_entry) == (OBJECT_ID, BACKGROUND_ID)


def test_decoupled_hits_without_a_whole_match() -> None:
    hit = choose_video_hit(None, obj(0.80), background(0.77), NIRVANA_T2T)
    assert hit is not None and (hit.kind, hit.k, hit.similarity) == (HitKind.DECOUPLED, 10, 0.77)


@pytest.mark.parametrize(("object_similarity", "background_similarity"), [(0.99, 0.60), (0.50, 0.97)])
def test_only_one_part_passing_is_a_miss(object_similarity: float, background_similarity: float) -> None:
    assert (
        choose_video_hit(None, obj(object_similarity), background(background_similarity), NIRVANA_T2T) is None
    )
    assert (
        choose_video_hit(whole(0.6), obj(object_similarity), background(background_similarity), NIRVANA_T2T)
        is None
    )


def test_the_whole_prompt_wins_a_tie() -> None:
    hit = choose_video_hit(whole(0.88), obj(0.88), background(0.93), NIRVANA_T2T)
    assert hit == VideoHit(HitKind.WHOLE, (WHOLE_ID,), 0.88, 15, HitKind.WHOLE)


def test_whole_wins_when_higher_than_the_decoupled_min() -> None:
    hit = choose_video_hit(whole(0.86), obj(0.99), background(0.80), NIRVANA_T2T)
    assert hit is not None and (hit.kind, hit.k) == (HitKind.WHOLE, 15)


def test_everything_below_the_table_is_a_miss() -> None:
    assert choose_video_hit(whole(0.65), obj(0.65), background(0.99), NIRVANA_T2T) is None
    assert choose_video_hit(None, None, None, NIRVANA_T2T) is None
    assert choose_video_hit(None, obj(0.99), None, NIRVANA_T2T) is None  # a prompt without a background


def test_a_decoupled_k_must_be_stored_by_both_entries() -> None:
    # 0.96 chooses 25; the object entry lost 25 and 20, the background lost 15: both hold 10.
    hit = choose_video_hit(None, obj(0.97, (5, 10, 15)), background(0.96, (5, 10, 20, 25)), NIRVANA_T2T)
    assert hit is not None and (hit.kind, hit.k) == (HitKind.DECOUPLED, 10)


def test_a_decoupled_pair_with_no_common_k_falls_back_to_the_whole_match() -> None:
    object_match, background_match = obj(0.97, (15, 20)), background(0.96, (5, 10))
    hit = choose_video_hit(whole(0.80), object_match, background_match, NIRVANA_T2T)
    assert hit == VideoHit(HitKind.WHOLE, (WHOLE_ID,), 0.80, 10, HitKind.WHOLE)
    assert choose_video_hit(whole(0.60), object_match, background_match, NIRVANA_T2T) is None


def test_a_whole_match_of_holes_falls_back_to_the_pair() -> None:
    hit = choose_video_hit(whole(0.92, (25,)), obj(0.80), background(0.78), NIRVANA_T2T)
    assert hit is not None and (hit.kind, hit.k, hit.similarity) == (HitKind.DECOUPLED, 10, 0.78)


def test_object_and_background_of_one_entry_is_a_whole_hit_scored_decoupled() -> None:
    same = uuid.UUID(int=9)
    hit = choose_video_hit(whole(0.70), obj(0.93, entry=same), background(0.91, entry=same), NIRVANA_T2T)
    assert hit == VideoHit(HitKind.WHOLE, (same,), 0.91, 20, HitKind.DECOUPLED)


@pytest.mark.parametrize(("knob", "k"), [(-5, None), (-2, 5), (-1, 10), (0, 15), (1, 20), (2, 25), (9, 25)])
def test_the_knob_moves_rows_for_either_kind(knob: int, k: int | None) -> None:
    decoupled = choose_video_hit(whole(0.5), obj(0.87), background(0.86), NIRVANA_T2T, knob)
    assert (decoupled.k if decoupled else None) == k
    whole_hit = choose_video_hit(whole(0.86), None, None, NIRVANA_T2T, knob)
    assert (whole_hit.k if whole_hit else None) == k


def test_non_finite_similarity_is_refused() -> None:
    with pytest.raises(ValueError, match="not finite"):
        Match(WHOLE_ID, float("nan"), ALL_KS)


@pytest.mark.parametrize(
    ("hit_k", "saved"),
    [
        (None, (5, 10, 15, 20, 25)),
        (5, (10, 15, 20, 25)),
        (10, (15, 20, 25)),
        (12, (15, 20, 25)),
        (20, (25,)),
        (25, ()),
        (30, ()),
    ],
)
def test_states_to_save(hit_k: int | None, saved: tuple[int, ...]) -> None:
    assert states_to_save(hit_k, [25, 5, 15, 10, 20, 10]) == saved


def test_states_to_save_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        states_to_save(0, ALL_KS)
    with pytest.raises(ValueError):
        states_to_save(None, (0, 5))
