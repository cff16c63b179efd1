"""Admission's routing decision (pure): presets, holes, refine scaling, cache off."""

from __future__ import annotations

import uuid

from core.vocabulary import AdmissionOutcome, HitPolicy, Route
from jobs.admission import Candidate, cache_applies, decide
from jobs.policies.k_selection import parse_table

NIRVANA = parse_table("nirvana-t2t")
MODM = parse_table("modm-t2i")
ENTRY = uuid.uuid4()


def _candidate(similarity: float, ks: tuple[int, ...] = (5, 10, 15, 20, 25), final: bool = True) -> Candidate:
    return Candidate(entry_id=ENTRY, similarity=similarity, stored_ks=ks, has_final_latent=final)


def test_no_candidate_is_a_searched_miss() -> None:
    decision = decide(candidate=None, table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=50)
    assert (decision.outcome, decision.route, decision.k) == (
        AdmissionOutcome.SEARCHED_MISS,
        Route.MISS,
        None,
    )


def test_resume_takes_the_table_k_and_names_the_source() -> None:
    decision = decide(
        candidate=_candidate(0.93), table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=50
    )
    assert (decision.route, decision.k, decision.source_entry_id) == (Route.HIT, 20, ENTRY)
    assert decision.similarity == 0.93


def test_resume_falls_back_below_a_hole_and_misses_when_none_is_left() -> None:
    holed = _candidate(0.97, ks=(5, 15))
    assert decide(candidate=holed, table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=50).k == 15
    empty = _candidate(0.97, ks=())
    decision = decide(candidate=empty, table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=50)
    assert decision.route is Route.MISS and decision.similarity == 0.97


def test_dissimilar_candidate_is_a_miss() -> None:
    decision = decide(candidate=_candidate(0.5), table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=50)
    assert decision.outcome is AdmissionOutcome.SEARCHED_MISS


def test_refine_scales_k_to_the_request_steps_and_needs_a_final_latent() -> None:
    at_50 = decide(candidate=_candidate(0.30), table=MODM, knob=0, hit_policy=HitPolicy.REFINE, steps=50)
    at_20 = decide(candidate=_candidate(0.30), table=MODM, knob=0, hit_policy=HitPolicy.REFINE, steps=20)
    assert (at_50.k, at_20.k) == (30, 12)  # 30 of 50 steps skipped = 12 of 20
    no_final = _candidate(0.30, final=False)
    assert (
        decide(candidate=no_final, table=MODM, knob=0, hit_policy=HitPolicy.REFINE, steps=50).route
        is Route.MISS
    )


def test_cache_applies_only_to_runs_whose_schedule_the_latents_fit() -> None:
    assert cache_applies(cache_mode="auto", hit_policy=HitPolicy.RESUME, steps=50, capture_steps_t=50)
    assert not cache_applies(cache_mode="auto", hit_policy=HitPolicy.RESUME, steps=30, capture_steps_t=50)
    assert cache_applies(cache_mode="auto", hit_policy=HitPolicy.REFINE, steps=30, capture_steps_t=50)
    assert not cache_applies(cache_mode="off", hit_policy=HitPolicy.REFINE, steps=50, capture_steps_t=50)


def test_resume_scales_the_profiled_k_to_a_shorter_schedule_before_filling_holes() -> None:
    # T = 10 with states at 2, 4, 6, 8: similarity 0.93 profiles k = 20 of 50 = 4 of 10.
    candidate = _candidate(0.93, ks=(2, 4, 6, 8))
    assert decide(candidate=candidate, table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=10).k == 4
    holed = _candidate(0.93, ks=(2, 6, 8))
    assert decide(candidate=holed, table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=10).k == 2
