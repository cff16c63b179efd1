"""Admission's routing decision (pure): presets, holes, refine scaling, cache off."""

from __future__ import annotations

import uuid

from core.vocabulary import AdmissionOutcome, HitPolicy, Route
from jobs.admission import AdmissionDecision, Candidate, RouteCosts, cache_applies, cheaper_route, decide
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


# DiffServe 4.1's cascade 1: SD 1.5 at 35.6 ms a step (1780 ms for 50), SD-Turbo's light stage 110 ms.
SD15 = dict(hit_step_s=0.0356, light_stage_s=0.110, heavy_s=1.780)


def _hit(similarity: float = 0.97) -> AdmissionDecision:
    """nirvana-t2t's hit at k = 25 (similarity above 0.95)."""
    return decide(
        candidate=_candidate(similarity), table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=50
    )


def test_a_hit_stands_while_it_costs_less_than_a_light_stage_and_its_expected_escalation() -> None:
    hit = _hit()
    assert hit.route is Route.HIT and hit.k == 25
    # 25 steps = 0.89 s against 0.11 + 0.5 x 1.78 = 1.0 s: the hit is cheaper
    kept = cheaper_route(hit, RouteCosts(**SD15, escalated=0.5), steps=50)
    assert kept is hit


def test_a_hit_goes_light_first_once_the_miss_route_is_cheaper() -> None:
    hit = _hit()
    # f(t) = 0.3 under load: 0.11 + 0.3 x 1.78 = 0.644 s against the hit's 0.89 s
    routed = cheaper_route(hit, RouteCosts(**SD15, escalated=0.3), steps=50)
    assert (routed.outcome, routed.route, routed.k, routed.source_entry_id) == (
        AdmissionOutcome.COSTLIER_HIT,
        Route.MISS,
        None,
        None,
    )
    assert routed.similarity == hit.similarity
    # the break-even f is (0.89 - 0.11) / 1.78 = 0.438: just above it the hit stands again
    assert cheaper_route(hit, RouteCosts(**SD15, escalated=0.44), steps=50).route is Route.HIT


def test_without_measured_costs_or_for_a_miss_nothing_changes() -> None:
    hit = _hit()
    assert cheaper_route(hit, None, steps=50) is hit
    miss = decide(candidate=None, table=NIRVANA, knob=0, hit_policy=HitPolicy.RESUME, steps=50)
    assert cheaper_route(miss, RouteCosts(**SD15, escalated=0.0), steps=50) is miss


def test_a_deeper_k_is_cheaper_to_serve() -> None:
    costs = RouteCosts(**SD15, escalated=0.3)
    assert costs.hit_s(50, 25) > costs.miss_s() > costs.hit_s(50, 40)
