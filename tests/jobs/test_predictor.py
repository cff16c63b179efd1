"""The match predictor: it tracks "a cached embedding passes the threshold", round-trips through
bytes, and the NIRVANA 5.2 retrain rule."""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt
import pytest

from jobs.policies.predictor import (
    NU,
    MatchPredictor,
    fit_predictor,
    likely_hit,
    needs_retrain,
)

DIM = 48
THRESHOLD = 0.8


def _unit(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    result: npt.NDArray[np.float64] = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return result


def _near(
    points: npt.NDArray[np.float64], cosine: float, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Unit vectors at exactly `cosine` from each of `points`."""
    noise = rng.normal(size=points.shape)
    noise -= (noise * points).sum(axis=1, keepdims=True) * points
    noise = _unit(noise)
    return np.asarray(cosine * points + np.sqrt(1 - cosine**2) * noise, dtype=np.float64)


@pytest.fixture(scope="module")
def cache() -> npt.NDArray[np.float64]:
    return _unit(np.random.default_rng(7).normal(size=(300, DIM)))


@pytest.fixture(scope="module")
def predictor(cache: npt.NDArray[np.float64]) -> MatchPredictor:
    return fit_predictor(cache, threshold=THRESHOLD)


def test_predicts_hits_near_cached_embeddings_and_misses_far_from_them(
    cache: npt.NDArray[np.float64], predictor: MatchPredictor
) -> None:
    rng = np.random.default_rng(11)
    near = _near(cache[:100], 0.9, rng)  # true hits: 0.9 > 0.8
    borderline_miss = _near(cache[100:200], 0.7, rng)  # true misses, yet close-ish
    fresh = _unit(rng.normal(size=(100, DIM)))  # random directions: cos ~ 0 to everything
    assert predictor.predict_many(near).all()
    assert (cache @ borderline_miss.T).max(axis=0).max() < THRESHOLD
    assert not predictor.predict_many(borderline_miss).any()
    assert not predictor.predict_many(fresh).any()
    assert predictor.predict(cache[5]) is True


def test_soft_similarity_tracks_the_nearest_cached_cosine(
    cache: npt.NDArray[np.float64], predictor: MatchPredictor
) -> None:
    rng = np.random.default_rng(3)
    queries = np.vstack([_near(cache[:50], c, rng) for c in (0.95, 0.85, 0.75)])
    nearest = (queries @ cache.T).max(axis=1)
    assert np.abs(predictor.soft_similarity(queries) - nearest).max() < 0.03


def test_scale_of_the_query_does_not_matter(
    cache: npt.NDArray[np.float64], predictor: MatchPredictor
) -> None:
    assert predictor.predict(cache[0] * 37.0)
    assert np.allclose(predictor.soft_similarity(cache[:3] * 0.01), predictor.soft_similarity(cache[:3]))


def test_margin_lowers_the_bar(cache: npt.NDArray[np.float64]) -> None:
    query = _near(cache[:1], 0.75, np.random.default_rng(5))
    strict = fit_predictor(cache, threshold=THRESHOLD)
    lenient = fit_predictor(cache, threshold=THRESHOLD, margin=0.1)
    assert not strict.predict(query)
    assert lenient.predict(query)


def test_keeps_the_first_max_landmarks_rows(cache: npt.NDArray[np.float64]) -> None:
    small = fit_predictor(cache, threshold=THRESHOLD, max_landmarks=10)
    assert small.size == 10
    assert small.predict(cache[3])
    assert not small.predict(cache[200])


def test_bytes_round_trip_exactly(cache: npt.NDArray[np.float64], predictor: MatchPredictor) -> None:
    data = predictor.to_bytes()
    again = MatchPredictor.from_bytes(data)
    assert (again.size, again.dim, again.gamma, again.threshold, again.margin, again.nu) == (
        predictor.size,
        predictor.dim,
        predictor.gamma,
        predictor.threshold,
        predictor.margin,
        NU,
    )
    queries = _unit(np.random.default_rng(1).normal(size=(20, DIM)))
    assert np.array_equal(again.soft_similarity(queries), predictor.soft_similarity(queries))
    assert again.to_bytes() == data


def test_from_bytes_refuses_other_data(predictor: MatchPredictor) -> None:
    data = predictor.to_bytes()
    with pytest.raises(ValueError, match="too short"):
        MatchPredictor.from_bytes(b"RP")
    with pytest.raises(ValueError, match="bad magic"):
        MatchPredictor.from_bytes(b"XXXX" + data[4:])
    with pytest.raises(ValueError, match="format 2"):
        MatchPredictor.from_bytes(data[:4] + struct.pack("<H", 2) + data[6:])
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
    a = fit_predictor(cache, threshold=THRESHOLD, max_training_rows=100, random_state=4)
    b = fit_predictor(cache, threshold=THRESHOLD, max_training_rows=100, random_state=4)
    assert a.to_bytes() == b.to_bytes()


@pytest.mark.parametrize(
    ("at_fit", "now", "changed", "expected"),
    [
        (100, 100, 5, False),  # exactly 5% is not "> 5%"
        (100, 100, 6, True),
        (100, 104, 4, False),
        (100, 94, 0, True),  # the net shrink alone is 6%
        (1000, 1000, 50, False),
        (1000, 1000, 51, True),
        (0, 0, 0, False),
        (0, 1, 0, True),  # never fitted: fit as soon as there is something
    ],
)
def test_retrain_rule(at_fit: int, now: int, changed: int, expected: bool) -> None:
    assert needs_retrain(at_fit, now, changed) is expected


def test_retrain_rule_threshold_is_configurable() -> None:
    assert needs_retrain(100, 100, 6, change=0.10) is False
    assert needs_retrain(100, 100, 11, change=0.10) is True


def test_likely_hit_across_scopes(cache: npt.NDArray[np.float64], predictor: MatchPredictor) -> None:
    empty = fit_predictor(np.zeros((0, DIM)), threshold=THRESHOLD, dim=DIM)
    far = _unit(np.random.default_rng(9).normal(size=(1, DIM)))[0]
    assert likely_hit([empty, predictor], cache[0])
    assert not likely_hit([empty, predictor], far)
    assert likely_hit([empty, None], far)  # a scope never fitted: search it
    assert not likely_hit([], far)
