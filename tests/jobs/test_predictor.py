"""The match predictor: a Nystroem-map SGDOneClassSVM whose learned weights and held-out threshold
decide, bytes round-trip, and the retrain rule (NIRVANA 5.2's 5% and insert bursts)."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import numpy.typing as npt
import pytest

from jobs.policies.predictor import NU_GRID, MatchPredictor, fit_predictor, likely_hit, needs_retrain

DIM = 48
THRESHOLD = 0.65


def _unit(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    result: npt.NDArray[np.float64] = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return result


def _near(
    points: npt.NDArray[np.float64], cosine: float, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Unit vectors at exactly `cosine` from each of `points`."""
    noise = rng.normal(size=points.shape)
    noise -= (noise * points).sum(axis=1, keepdims=True) * points
    return np.asarray(cosine * points + np.sqrt(1 - cosine**2) * _unit(noise), dtype=np.float64)


@pytest.fixture(scope="module")
def cache() -> npt.NDArray[np.float64]:
    """Prompts come in groups (DiffusionDB repeats and rephrases), 150 topics of 4 cached prompts, and
    300 one-off prompts."""
    rng = np.random.default_rng(7)
    topics = _unit(rng.normal(size=(150, DIM)))
    return np.vstack([*(_near(topics, 0.85, rng) for _ in range(4)), _unit(rng.normal(size=(300, DIM)))])


@pytest.fixture(scope="module")
def queries(cache: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Held-out queries and the truth: their nearest cached embedding passes THRESHOLD."""
    rng = np.random.default_rng(11)
    near = _near(cache[:200], 0.8, rng)
    middling = _near(cache[200:400], 0.45, rng)
    fresh = _unit(rng.normal(size=(200, DIM)))
    asked = np.vstack([near, middling, fresh])
    return asked, (asked @ cache.T).max(axis=1) >= THRESHOLD


@pytest.fixture(scope="module")
def predictor(cache: npt.NDArray[np.float64]) -> MatchPredictor:
    return fit_predictor(cache, threshold=THRESHOLD)


def _precision_recall(predicted: npt.NDArray[np.bool_], truth: npt.NDArray[np.bool_]) -> tuple[float, float]:
    tp = float((predicted & truth).sum())
    return tp / max(float(predicted.sum()), 1.0), tp / float(truth.sum())


def test_held_out_operating_point_is_nirvanas(
    predictor: MatchPredictor, queries: tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]
) -> None:
    asked, truth = queries
    precision, recall = _precision_recall(predictor.predict_many(asked), truth)
    assert 0.2 < truth.mean() < 0.6
    assert recall >= 0.9 and precision >= 0.9
    assert predictor.nu in NU_GRID
    assert predictor.holdout_recall is not None and predictor.holdout_recall >= 0.95
    assert predictor.holdout_precision is not None and predictor.holdout_precision > 0.5


def test_the_learned_weights_decide(
    predictor: MatchPredictor, queries: tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]
) -> None:
    """A skipped fit (SGDOneClassSVM starts from zero weights, offset 0) is a different and much worse
    predictor on held-out queries. (The fitted weights are close to uniform: the fit is near a Parzen
    window over the landmarks, so reordering them changes little; what the fit sets is their scale
    and the offset the held-out threshold is read against.)"""
    asked, truth = queries
    fitted = predictor.predict_many(asked)
    assert not np.allclose(predictor.weights, predictor.weights.mean())  # the SVM moved the weights
    untrained = dataclasses.replace(predictor, weights=np.zeros(predictor.size), offset=0.0)
    predicted = untrained.predict_many(asked)
    assert (predicted != fitted).mean() > 0.1
    precision, recall = _precision_recall(predicted, truth)
    assert min(precision, recall) < 0.75


def test_the_held_out_threshold_decides(
    predictor: MatchPredictor, queries: tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]
) -> None:
    """sklearn's own boundary (decision >= 0) is not the D.1 operating point."""
    asked, truth = queries
    precision, recall = _precision_recall(predictor.decision(asked) >= 0.0, truth)
    assert min(precision, recall) < 0.75


def test_a_fixed_nu_is_kept(cache: npt.NDArray[np.float64]) -> None:
    assert fit_predictor(cache, threshold=THRESHOLD, nu=0.001).nu == 0.001


def test_scale_of_the_query_does_not_matter(
    cache: npt.NDArray[np.float64], predictor: MatchPredictor
) -> None:
    assert predictor.predict(cache[0] * 37.0)
    assert np.allclose(predictor.score(cache[:3] * 0.01), predictor.score(cache[:3]))


def test_few_entries_admit_every_cached_embedding() -> None:
    """Too little to hold out: nu = NIRVANA's 0.001 and every query is searched."""
    rows = _unit(np.random.default_rng(2).normal(size=(12, DIM)))
    small = fit_predictor(rows, threshold=THRESHOLD)
    assert small.nu == 0.001 and small.holdout_precision is None
    assert small.predict_many(rows).all()
    assert small.predict_many(_unit(np.random.default_rng(3).normal(size=(20, DIM)))).all()


def test_bytes_round_trip_exactly(cache: npt.NDArray[np.float64], predictor: MatchPredictor) -> None:
    data = predictor.to_bytes()
    again = MatchPredictor.from_bytes(data)
    assert dataclasses.astuple(again)[2:] == dataclasses.astuple(predictor)[2:]
    queries = _unit(np.random.default_rng(1).normal(size=(20, DIM)))
    assert np.array_equal(again.score(queries), predictor.score(queries))
    assert again.to_bytes() == data


def test_from_bytes_refuses_other_data(predictor: MatchPredictor) -> None:
    data = predictor.to_bytes()
    with pytest.raises(ValueError, match="too short"):
        MatchPredictor.from_bytes(b"RP")
    with pytest.raises(ValueError, match="bad magic"):
        MatchPredictor.from_bytes(b"XXXX" + data[4:])
    with pytest.raises(ValueError, match="format 1"):
        MatchPredictor.from_bytes(data[:4] + struct.pack("<H", 1) + data[6:])
    with pytest.raises(ValueError, match="header says"):
        MatchPredictor.from_bytes(data[:-8])


def test_empty_cache_predicts_misses() -> None:
    empty = fit_predictor(np.zeros((0, DIM)), threshold=THRESHOLD, dim=DIM)
    assert empty.size == 0
    assert not empty.predict(np.ones(DIM))
    assert MatchPredictor.from_bytes(empty.to_bytes()).size == 0
    with pytest.raises(ValueError, match="needs dim"):
        fit_predictor(np.zeros((0, DIM)), threshold=THRESHOLD)


def test_wrong_dimension_is_refused(predictor: MatchPredictor) -> None:
    with pytest.raises(ValueError, match="fitted on 48"):
        predictor.predict(np.ones(DIM + 1))


def test_fit_is_deterministic(cache: npt.NDArray[np.float64]) -> None:
    a = fit_predictor(cache, threshold=THRESHOLD, random_state=4)
    b = fit_predictor(cache, threshold=THRESHOLD, random_state=4)
    assert a.to_bytes() == b.to_bytes()


@pytest.mark.parametrize(
    ("at_fit", "now", "changed", "inserted", "expected"),
    [
        (100, 100, 5, 0, False),  # exactly 5% is not "> 5%"
        (100, 100, 6, 0, True),
        (100, 104, 4, 4, False),
        (100, 94, 0, 0, True),  # the net shrink alone is 6%
        (10000, 10000, 500, 63, False),
        (10000, 10000, 64, 64, True),  # an insert burst, far below 5%
        (0, 0, 0, 0, False),
        (0, 1, 0, 1, True),  # never fitted: fit as soon as there is something
    ],
)
def test_retrain_rule(at_fit: int, now: int, changed: int, inserted: int, expected: bool) -> None:
    assert needs_retrain(at_fit, now, changed, inserted) is expected


def test_retrain_rule_is_configurable() -> None:
    assert needs_retrain(100, 100, 6, change=0.10) is False
    assert needs_retrain(100, 100, 11, change=0.10) is True
    assert needs_retrain(10000, 10000, 100, 100, inserts=0) is False  # bursts off
    assert needs_retrain(10000, 10000, 10, 10, inserts=10) is True


def test_likely_hit_across_scopes(cache: npt.NDArray[np.float64], predictor: MatchPredictor) -> None:
    empty = fit_predictor(np.zeros((0, DIM)), threshold=THRESHOLD, dim=DIM)
    far = _unit(np.random.default_rng(9).normal(size=(1, DIM)))[0]
    assert likely_hit([empty, predictor], cache[0])
    assert not likely_hit([empty, predictor], far)
    assert likely_hit([empty, None], far)  # a scope never fitted: search it
    assert not likely_hit([], far)
