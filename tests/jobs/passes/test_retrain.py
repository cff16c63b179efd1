"""The match predictor end to end on the real database: fitted from a scope's entries, persisted,
reloaded, left alone under the 5% rule, retrained past it, pruned, and scored against lookups."""

from __future__ import annotations

import uuid

import numpy as np
import numpy.typing as npt
import pytest
from sqlalchemy import func, select, update

from core.scopes import tenant_scope
from core.settings import Settings
from core.vocabulary import EntryState, LookupMode
from db import cache, predictor_store
from db.engine import session_scope
from db.models import CacheEntry, PredictorFit
from jobs.passes.retrain import load_predictor, retrain_predictors, retrain_scope
from jobs.policies.k_selection import configured_table

pytestmark = pytest.mark.integration

FAMILY = "tiny-sd"
TEXT = LookupMode.TEXT_TO_TEXT


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> npt.NDArray[np.float32]:
    m = rng.normal(size=(n, dim))
    return np.asarray(m / np.linalg.norm(m, axis=1, keepdims=True), dtype=np.float32)


def add(settings: Settings, scope: str, embeddings: npt.NDArray[np.float32]) -> list[uuid.UUID]:
    ids = []
    with session_scope(settings) as session:
        for vector in embeddings:
            entry_id = uuid.uuid4()
            cache.insert_entry(
                session,
                entry_id=entry_id,
                scope=scope,
                model_family=FAMILY,
                prompt="p",
                text_embedding=vector,
                image_embedding=None,
                final_latent_key=None,
                final_bytes=10,
                steps=50,
                states=[],
            )
            ids.append(entry_id)
    return ids


def retrain(settings: Settings, scope: str) -> int | None:
    with session_scope(settings) as session:
        result = retrain_scope(session, settings, scope=scope, model_family=FAMILY)
    return None if result is None else result.version


def test_fit_is_persisted_reloaded_and_retrained_after_more_than_5_percent(db_settings: Settings) -> None:
    rng = np.random.default_rng(42)
    dim = db_settings.text_embedding_dim
    scope = tenant_scope(uuid.uuid4())
    cached = unit_rows(rng, 40, dim)
    ids = add(db_settings, scope, cached)

    first = retrain(db_settings, scope)
    assert first is not None
    with session_scope(db_settings) as session:
        loaded = load_predictor(session, scope=scope, model_family=FAMILY, mode=TEXT)
    assert loaded is not None and loaded.version == first and loaded.entries == 40
    assert loaded.predictor.size == 40
    assert (
        loaded.predictor.threshold == configured_table(db_settings).lowest_similarity
    )  # the table's lowest row
    assert loaded.predictor.predict(cached[7])
    # 40 unrelated entries: no held-out hits to choose an operating point on, so everything is searched.
    assert loaded.predictor.predict(unit_rows(rng, 1, dim)[0])

    assert retrain(db_settings, scope) is None  # nothing changed
    add(db_settings, scope, unit_rows(rng, 2, dim))
    assert retrain(db_settings, scope) is None  # 2 of 40 = 5%: not more than 5%
    add(db_settings, scope, unit_rows(rng, 1, dim))
    second = retrain(db_settings, scope)  # 3 of 40 > 5%
    assert second is not None and second > first
    with session_scope(db_settings) as session:
        newest = load_predictor(session, scope=scope, model_family=FAMILY, mode=TEXT)
        assert predictor_store.latest_version(session, scope=scope, model_family=FAMILY, mode=TEXT) == second
    assert newest is not None and newest.entries == 43 and newest.predictor.size == 43

    # Removals count too: 3 entries evicted (dirty) out of 43.
    with session_scope(db_settings) as session:
        session.execute(
            update(CacheEntry).where(CacheEntry.id.in_(ids[:3])).values(state=EntryState.DIRTY.value)
        )
    third = retrain(db_settings, scope)
    assert third is not None
    with session_scope(db_settings) as session:
        versions = session.scalars(select(PredictorFit.version).where(PredictorFit.scope == scope)).all()
    assert sorted(versions) == [second, third]  # older fits pruned (KEEP_FITS = 2)


def test_retrain_predictors_covers_every_scope_and_respects_the_switch(db_settings: Settings) -> None:
    rng = np.random.default_rng(7)
    scope = tenant_scope(uuid.uuid4())
    add(db_settings, scope, unit_rows(rng, 5, db_settings.text_embedding_dim))
    assert retrain_predictors(db_settings.model_copy(update={"predictor_enabled": False})) == []
    enabled = db_settings.model_copy(update={"predictor_enabled": True})
    results = retrain_predictors(enabled)
    assert [(r.scope, r.model_family, r.entries) for r in results if r.scope == scope] == [(scope, FAMILY, 5)]
    again = retrain_predictors(enabled)
    assert scope not in {r.scope for r in again}


def test_an_emptied_scope_gets_a_fit_that_predicts_misses(db_settings: Settings) -> None:
    rng = np.random.default_rng(3)
    scope = tenant_scope(uuid.uuid4())
    cached = unit_rows(rng, 4, db_settings.text_embedding_dim)
    ids = add(db_settings, scope, cached)
    assert retrain(db_settings, scope) is not None
    with session_scope(db_settings) as session:
        session.execute(update(CacheEntry).where(CacheEntry.id.in_(ids)).values(state=EntryState.DIRTY.value))
    assert retrain(db_settings, scope) is not None
    with session_scope(db_settings) as session:
        loaded = load_predictor(session, scope=scope, model_family=FAMILY, mode=TEXT)
    assert loaded is not None and loaded.entries == 0 and not loaded.predictor.predict(cached[0])


def test_outcome_counters_give_precision_and_recall(db_settings: Settings) -> None:
    rng = np.random.default_rng(1)
    scope = tenant_scope(uuid.uuid4())
    add(db_settings, scope, unit_rows(rng, 3, db_settings.text_embedding_dim))
    version = retrain(db_settings, scope)
    assert version is not None
    outcomes = [(True, True)] * 8 + [(True, False)] * 2 + [(False, True)] * 1 + [(False, False)] * 5
    for predicted, actual in outcomes:
        with session_scope(db_settings) as session:
            predictor_store.record_outcome(
                session, version=version, predicted_hit=predicted, actual_hit=actual
            )
    with session_scope(db_settings) as session:
        quality = predictor_store.fit_quality(session, version=version)
        assert predictor_store.fit_quality(session, version=-1) is None
        predictor_store.record_outcome(session, version=-1, predicted_hit=True, actual_hit=True)  # ignored
        assert (
            session.scalar(select(func.count()).select_from(PredictorFit).where(PredictorFit.version == -1))
            == 0
        )
    assert quality is not None
    assert (quality.true_pos, quality.false_pos, quality.false_neg, quality.true_neg) == (8, 2, 1, 5)
    assert quality.precision == pytest.approx(0.8)
    assert quality.recall == pytest.approx(8 / 9)


def test_an_insert_burst_retrains_below_5_percent(db_settings: Settings) -> None:
    """predictor_retrain_inserts: 2 inserts into 40 entries (5%, not past it) retrain when the burst is 2."""
    rng = np.random.default_rng(5)
    dim = db_settings.text_embedding_dim
    scope = tenant_scope(uuid.uuid4())
    add(db_settings, scope, unit_rows(rng, 40, dim))
    bursty = db_settings.model_copy(update={"predictor_retrain_inserts": 2})
    assert retrain(bursty, scope) is not None
    add(db_settings, scope, unit_rows(rng, 1, dim))
    assert retrain(bursty, scope) is None
    add(db_settings, scope, unit_rows(rng, 1, dim))
    assert retrain(bursty, scope) is not None


def test_a_fit_in_an_older_format_is_ignored_and_replaced(db_settings: Settings) -> None:
    rng = np.random.default_rng(6)
    scope = tenant_scope(uuid.uuid4())
    add(db_settings, scope, unit_rows(rng, 10, db_settings.text_embedding_dim))
    with session_scope(db_settings) as session:
        predictor_store.save_fit(
            session, scope=scope, model_family=FAMILY, mode=TEXT, entries=10, model=b"RPMP\x01\x00"
        )
    with session_scope(db_settings) as session:
        assert load_predictor(session, scope=scope, model_family=FAMILY, mode=TEXT) is None
    assert retrain(db_settings, scope) is not None
