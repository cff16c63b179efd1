"""Admission decides from the quality guard's table: once the guard has tightened a row, a request
that the configured table would have served as a hit at that similarity is a miss (NIRVANA Algorithm
1's table, held to the target online). If admission stopped reading the guard's table, this fails."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from core.settings import Settings
from core.vocabulary import HitPolicy, LookupMode, Route
from db import quality_guard as guard_db
from db.cache import LookupResult
from db.engine import session_scope
from jobs.passes.quality_guard import run_guard
from workers.kinds.image.admission import _routed

pytestmark = pytest.mark.integration


def _found(similarity: float) -> LookupResult:
    return LookupResult(
        entry_id=uuid.uuid4(),
        similarity=similarity,
        stored_ks=(5, 10, 15, 20, 25),
        scope="tenant",
        model_family="lab-a",
        final_latent_key="final",
    )


def _admit(settings: Settings, similarity: float) -> Any:
    context = SimpleNamespace(settings=settings, cascade_cache={})
    request = SimpleNamespace(params=SimpleNamespace(steps=settings.steps))
    return _routed(context, request, _found(similarity))  # type: ignore[arg-type]


def test_a_row_the_guard_tightened_turns_admission_s_hit_into_a_miss(db_settings: Settings) -> None:
    settings = db_settings.model_copy(
        update={
            "quality_guard": True,
            "quality_guard_min_sample": 4,
            "k_table": "nirvana-t2t",
            "lookup_mode": LookupMode.TEXT_TO_TEXT,
            "hit_policy": HitPolicy.RESUME,
            "steps": 50,
            "capture_steps": [5, 10, 15, 20, 25],
            "quality_guard_cache_s": 0.001,
        }
    )
    before = _admit(settings, 0.66)
    assert (before.route, before.k) == (Route.HIT, 5)  # the configured table serves it
    with session_scope(settings) as session:
        for similarity, hit in ((0.66, 0.5), (0.71, 0.7)):  # the lowest bin loses 0.3; the next holds
            for _ in range(4):
                guard_db.record_audit(
                    session,
                    job_id=uuid.uuid4(),
                    similarity=similarity,
                    k=5,
                    steps=50,
                    hit_score=hit,
                    fresh_score=0.8 if similarity < 0.7 else 0.7,
                    scorer="lab-judge",
                )
    decision = run_guard(settings)
    assert decision is not None and decision.changed
    after = _admit(settings, 0.66)
    assert after.route is Route.MISS
    assert _admit(settings, 0.71).route is Route.HIT  # above the tightened row, still a hit
    assert _admit(settings.model_copy(update={"quality_guard": False}), 0.66).route is Route.HIT
