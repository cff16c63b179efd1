"""NIRVANA's match predictor (5.2): will the vector search find a close enough match?

NIRVANA trains scikit-learn's SGDOneClassSVM (nu = 0.001, section 6) on every prompt embedding in the
cache and asks it, before searching, whether a query is *likely* to match; a predicted miss skips the
search. Its operating point is a threshold on the SVM's decision function chosen for precision
0.96 at recall 0.95 (Appendix D.1). The paper leaves the features open; a linear SVM on raw
embeddings cannot carve out "near some cached prompt" (`python -m bench.cache.predictor`). This module:

1. Features: embeddings are L2-normalised (the lookup's cosine geometry) and mapped through a
   Nystroem approximation of the RBF kernel k(x, y) = exp(-gamma |x - y|^2) = exp(-2 gamma (1 - cos))
   over `landmarks` cached embeddings sampled at random (sklearn.kernel_approximation.Nystroem's
   construction: phi(x) = K_LL^(-1/2) k(L, x)).
2. Model: SGDOneClassSVM(nu) on phi of the cached embeddings. Its learned coef_ and offset_ are the
   predictor: decision(x) = coef . phi(x) - offset = w . k(L, x) - offset with w = K_LL^(-1/2) coef,
   so a prediction costs one (landmarks x d) product.
3. nu and the decision threshold are chosen on held-out data, as D.1 does: 20% of the cache is held
   out, the model is fitted on the rest for each nu of NU_GRID (the paper's 0.001 first), a held-out
   entry is a true hit when its nearest fitted neighbour passes the table's lowest row, and the
   threshold is the highest one that keeps recall >= 0.95 (D.1's R); the nu with the best held-out
   precision wins (ties: the smaller). The model is then refitted on the whole cache with that nu
   and the threshold carried over in standard deviations of the training scores.

The chosen nu, the held-out precision and recall travel with the fit (`nu`, `holdout_precision`,
`holdout_recall`). Serialised without pickle (a versioned header, then arrays), so fits stored in
Postgres stay readable across library upgrades. No I/O here.
"""

from __future__ import annotations

import json
import struct
import warnings
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDOneClassSVM

NU = 0.001
"""NIRVANA 6: SGDOneClassSVM with nu = 0.001 -- the first candidate of NU_GRID."""

NU_GRID = (0.001, 0.01, 0.1, 0.5)
"""Candidates for nu, chosen on held-out data (NIRVANA fixes 0.001 for CLIP embeddings of its own
trace). MiniLM/DiffusionDB, 2000 cached, gamma 32: precision at recall 0.95 on the held-out 20% was
0.82 / 0.88 / 0.98 / 0.98 for these, and on the next 500 prompts 0.41 / 0.54 / 0.92 / 0.92 (at 0.001
the SVM calls everything a hit)."""

TARGET_RECALL = 0.95
"""NIRVANA D.1: the operating point P = 0.96, R = 0.95; the threshold keeps held-out recall >= R."""

HOLDOUT = 0.2
"""Share of the cache held out to choose nu and the threshold."""

MIN_HOLDOUT_HITS = 5
"""Below this many held-out true hits there is nothing to choose on: nu = NU and the predictor
says "likely" to everything (a small cache is cheap to search)."""

RETRAIN_CHANGE = 0.05
"""NIRVANA 5.2: retrain when the cached embeddings changed by more than 5%."""

RETRAIN_INSERTS = 64
"""Also retrain after this many inserts since the fit (an insert burst; not from the papers: the 5%
rule alone leaves a large cache's newest entries unknown to the predictor for long)."""

GAMMA = 32.0
"""RBF width on unit vectors (a kernel term exp(-64 (1 - cos)) is 1.8e-10 at cos 0.65): measured on
MiniLM (2000 cached, the next 500 asked, 1024 landmarks, nu 0.5), gamma 8 / 16 / 32 gave precision
0.64 / 0.85 / 0.92 at recall 0.99 / 0.95 / 0.94."""

LANDMARKS = 1024
"""Nystroem components: 1024 x 384 float32 = 1.5 MB; the map costs one 1024 x 1024 eigendecomposition
per fit (about 0.4 s on one core)."""

MAX_TRAINING_ROWS = 4096
"""The fit sees at most this many cached embeddings (the most recently used, the caller's order)."""

EPOCHS = 20
"""SGD epochs (NIRVANA 5.4: retraining 10k records takes 0.04 s; the fit must stay cheap)."""

_MAGIC = b"RPMP"
_FORMAT_VERSION = 2
_HEADER = struct.Struct("<4sHI")  # magic, format version, JSON length

FloatArray = npt.NDArray[np.float64]
Unit = npt.NDArray[np.float32]


@cache
def _blas_controller() -> Any:
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]  # scikit-learn's dependency

    return ThreadpoolController()


def _single_threaded_blas() -> AbstractContextManager[object]:
    """A query is a matrix-vector product: BLAS threads cost far more than they save there (measured on
    2 cores, OpenBLAS 0.3.31, 2000 landmarks: 12 ms per prediction threaded, 0.1 ms on one thread)."""
    limit: AbstractContextManager[object] = _blas_controller().limit(limits=1, user_api="blas")
    return limit


def _unit_rows(embeddings: npt.ArrayLike) -> Unit:
    matrix = np.atleast_2d(np.asarray(embeddings, dtype=np.float32))
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: Unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


def _kernel(queries: Unit, landmarks: Unit, gamma: float) -> FloatArray:
    cosine = (queries @ landmarks.T).astype(np.float64)
    result: FloatArray = np.exp(2.0 * gamma * (cosine - 1.0))
    return result


@dataclass(frozen=True, eq=False)
class MatchPredictor:
    """A fitted predictor. `predict` is cheap and pure; `to_bytes`/`from_bytes` round-trip exactly.

    landmarks: (m, d) unit rows; weights: (m,) the SVM's coef_ expressed over the landmarks; offset:
    its offset_; cut: the decision threshold chosen on held-out data; threshold: the lookup's lowest
    passing similarity (the truth the fit was tuned for). No landmarks (an empty cache): all misses.
    """

    landmarks: Unit
    weights: FloatArray
    offset: float
    cut: float
    gamma: float
    threshold: float
    nu: float = NU
    holdout_precision: float | None = None
    holdout_recall: float | None = None

    @property
    def dim(self) -> int:
        return int(self.landmarks.shape[1])

    @property
    def size(self) -> int:
        """Number of landmarks."""
        return int(self.landmarks.shape[0])

    def decision(self, embeddings: npt.ArrayLike) -> FloatArray:
        """The SVM's decision function for each row; -inf with no landmarks."""
        queries = _unit_rows(embeddings)
        if queries.shape[1] != self.dim:
            raise ValueError(
                f"embedding has {queries.shape[1]} dimensions; this predictor was fitted on {self.dim}"
            )
        if self.size == 0:
            return np.full(queries.shape[0], -np.inf)
        with _single_threaded_blas():
            result: FloatArray = _kernel(queries, self.landmarks, self.gamma) @ self.weights - self.offset
        return result

    def score(self, embeddings: npt.ArrayLike) -> FloatArray:
        """log(decision + offset) / (2 gamma) for each row (see `_log_score`); what `cut` applies to."""
        return _log_score(self.decision(embeddings) + self.offset, self.gamma)

    def predict_many(self, embeddings: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """For each row: True when a match passing the threshold is likely."""
        result: npt.NDArray[np.bool_] = self.score(embeddings) >= self.cut
        return result

    def predict(self, embedding: npt.ArrayLike) -> bool:
        """True when the vector search is likely to find a match passing the threshold."""
        return bool(self.predict_many(embedding)[0])

    def to_bytes(self) -> bytes:
        """Versioned header (JSON) + landmarks (float32 LE) + weights (float64 LE). No pickle."""
        header = json.dumps(
            {
                "kind": "nystroem-sgd-ocsvm",
                "m": self.size,
                "d": self.dim,
                "offset": self.offset,
                "cut": self.cut,
                "gamma": self.gamma,
                "threshold": self.threshold,
                "nu": self.nu,
                "holdout_precision": self.holdout_precision,
                "holdout_recall": self.holdout_recall,
            },
            sort_keys=True,
        ).encode()
        return b"".join(
            (
                _HEADER.pack(_MAGIC, _FORMAT_VERSION, len(header)),
                header,
                np.ascontiguousarray(self.landmarks, dtype="<f4").tobytes(),
                np.ascontiguousarray(self.weights, dtype="<f8").tobytes(),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> MatchPredictor:
        """Inverse of `to_bytes`; ValueError for anything else (including other format versions)."""
        if len(data) < _HEADER.size:
            raise ValueError("match predictor blob too short")
        magic, version, header_len = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise ValueError("not a match predictor blob (bad magic)")
        if version != _FORMAT_VERSION:
            raise ValueError(f"match predictor format {version}; this build reads {_FORMAT_VERSION}")
        start = _HEADER.size
        header = json.loads(data[start : start + header_len])
        m, d = int(header["m"]), int(header["d"])
        offset = start + header_len
        end = offset + m * d * 4 + m * 8
        if len(data) != end:
            raise ValueError(f"match predictor blob has {len(data)} bytes; its header says {end}")
        landmarks = (
            np.frombuffer(data, dtype="<f4", count=m * d, offset=offset).reshape(m, d).astype(np.float32)
        )
        weights = np.frombuffer(data, dtype="<f8", count=m, offset=offset + m * d * 4).astype(np.float64)
        return cls(
            landmarks=landmarks,
            weights=weights,
            offset=float(header["offset"]),
            cut=float(header["cut"]),
            gamma=float(header["gamma"]),
            threshold=float(header["threshold"]),
            nu=float(header["nu"]),
            holdout_precision=header["holdout_precision"],
            holdout_recall=header["holdout_recall"],
        )


@dataclass(frozen=True, slots=True)
class _Map:
    """A Nystroem map: landmarks sampled from `rows`, K_LL^(-1/2), and k(rows, L)."""

    landmarks: Unit
    normaliser: FloatArray
    raw: FloatArray

    @classmethod
    def build(cls, rows: Unit, *, gamma: float, landmarks: int, seed: int) -> _Map:
        rng = np.random.default_rng(seed)
        chosen = (
            rows if rows.shape[0] <= landmarks else rows[rng.choice(rows.shape[0], landmarks, replace=False)]
        )
        eigenvalues, vectors = np.linalg.eigh(_kernel(chosen, chosen, gamma))
        keep = eigenvalues > 1e-10 * eigenvalues.max()
        normaliser = (vectors[:, keep] / np.sqrt(eigenvalues[keep])) @ vectors[:, keep].T
        return cls(chosen.copy(), normaliser, _kernel(rows, chosen, gamma))


@dataclass(frozen=True, slots=True)
class _Svm:
    """SGDOneClassSVM(nu) fitted on a map's features, expressed over its landmarks."""

    landmarks: Unit
    weights: FloatArray
    offset: float
    gamma: float
    train_scores: FloatArray  # `score` of the training rows

    @classmethod
    def fit(cls, features: _Map, *, nu: float, gamma: float, epochs: int, seed: int) -> _Svm:
        svm = SGDOneClassSVM(nu=nu, max_iter=epochs, tol=None, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed epoch budget, by design
            svm.fit(features.raw @ features.normaliser)
        weights = features.normaliser @ np.asarray(svm.coef_, dtype=np.float64).ravel()
        offset = float(np.asarray(svm.offset_).ravel()[0])
        return cls(features.landmarks, weights, offset, gamma, _log_score(features.raw @ weights, gamma))

    def score(self, queries: Unit) -> FloatArray:
        return _log_score(_kernel(queries, self.landmarks, self.gamma) @ self.weights, self.gamma)


def _log_score(kernel_sum: FloatArray, gamma: float) -> FloatArray:
    """log(coef . phi(x)) / (2 gamma): the SVM's decision + offset on a log scale, where a kernel term
    exp(-2 gamma (1 - cos)) reads as a cosine. Far from every landmark it is -inf or very low."""
    with np.errstate(divide="ignore", invalid="ignore"):
        result: FloatArray = np.log(np.maximum(kernel_sum, 0.0)) / (2.0 * gamma)
    return result


@dataclass(frozen=True, slots=True)
class _Choice:
    nu: float
    cut: float  # on the held-out model's score
    precision: float
    recall: float


def _operating_point(
    scores: FloatArray, truth: npt.NDArray[np.bool_], recall: float
) -> tuple[float, float, float]:
    """D.1: the highest threshold keeping recall >= `recall`; returns (threshold, precision, recall).
    A true hit the SVM scores at or below zero (-inf) can only be kept by calling everything a hit."""
    hits = np.sort(scores[truth])
    cut = float(hits[int(np.floor((1.0 - recall) * hits.size))])
    called = scores >= cut
    return cut, float((called & truth).sum() / called.sum()), float((called & truth).sum() / truth.sum())


def _choose(
    train: Unit, held_out: Unit, *, threshold: float, nus: tuple[float, ...], fit: dict[str, Any]
) -> tuple[_Choice, _Svm] | None:
    """nu and the threshold on held-out data; None when the held-out part has too few true hits."""
    truth = (held_out @ train.T).max(axis=1) >= threshold
    if int(truth.sum()) < MIN_HOLDOUT_HITS:
        return None
    features = _Map.build(train, gamma=fit["gamma"], landmarks=fit["landmarks"], seed=fit["seed"])
    best: tuple[_Choice, _Svm] | None = None
    for nu in nus:
        svm = _Svm.fit(features, nu=nu, gamma=fit["gamma"], epochs=fit["epochs"], seed=fit["seed"])
        cut, precision, recall = _operating_point(svm.score(held_out), truth, TARGET_RECALL)
        if best is None or precision > best[0].precision:  # ties: the earlier (smaller) nu
            best = (_Choice(nu, cut, precision, recall), svm)
    return best


def fit_predictor(
    embeddings: npt.ArrayLike,
    *,
    threshold: float,
    dim: int | None = None,
    nu: float | None = None,
    gamma: float = GAMMA,
    landmarks: int = LANDMARKS,
    epochs: int = EPOCHS,
    max_training_rows: int = MAX_TRAINING_ROWS,
    random_state: int = 0,
) -> MatchPredictor:
    """Fit on a scope's cached embeddings, most recently used first (the first `max_training_rows`).

    `threshold` is the similarity a lookup must pass to be a hit (ThresholdTable.lowest_similarity);
    `nu` None chooses it from NU_GRID on held-out data, a value fixes it (the threshold is still
    chosen on held-out data). `dim` is needed only for an empty cache. Deterministic per random_state.
    """
    points = _unit_rows(embeddings)[:max_training_rows] if np.size(embeddings) else None
    if points is None or points.shape[0] == 0:
        if dim is None:
            raise ValueError("fitting on no embeddings needs dim")
        return MatchPredictor(np.zeros((0, dim), dtype=np.float32), np.zeros(0), 0.0, 0.0, gamma, threshold)
    fit: dict[str, Any] = {"gamma": gamma, "landmarks": landmarks, "epochs": epochs, "seed": random_state}
    order = np.random.default_rng(random_state).permutation(points.shape[0])
    split = round(points.shape[0] * HOLDOUT)
    nus = NU_GRID if nu is None else (nu,)
    chosen = _choose(points[order[split:]], points[order[:split]], threshold=threshold, nus=nus, fit=fit)
    features = _Map.build(points, gamma=gamma, landmarks=landmarks, seed=random_state)
    final = _Svm.fit(
        features, nu=chosen[0].nu if chosen else (nu or NU), gamma=gamma, epochs=epochs, seed=random_state
    )
    finite = final.train_scores[np.isfinite(final.train_scores)]
    if chosen is None or finite.size == 0:
        # Nothing held out to choose on: no operating point, so every query is searched (a cut of -inf).
        return MatchPredictor(
            final.landmarks, final.weights, final.offset, -np.inf, gamma, threshold, nu or NU
        )
    choice, held = chosen
    # Carry the held-out threshold over to the refit, shifted by the change in median training score
    # (the scores are logs: a refit rescales the weights, which shifts them).
    cut = (
        choice.cut
        + float(np.median(finite))
        - float(np.median(held.train_scores[np.isfinite(held.train_scores)]))
    )
    return MatchPredictor(
        final.landmarks,
        final.weights,
        final.offset,
        cut,
        gamma,
        threshold,
        choice.nu,
        round(choice.precision, 4),
        round(choice.recall, 4),
    )


def needs_retrain(
    entries_at_fit: int,
    entries_now: int,
    changed_since_fit: int,
    inserted_since_fit: int = 0,
    *,
    change: float = RETRAIN_CHANGE,
    inserts: int = RETRAIN_INSERTS,
) -> bool:
    """When to refit, for the retrain pass and the simulator alike: NIRVANA 5.2's rule (more than
    `change`, 5%, of the cached embeddings changed since the fit) or an insert burst (at least
    `inserts` entries added since the fit; 0 disables it).

    changed_since_fit counts entries added plus entries removed since the fit; the net size change
    |entries_now - entries_at_fit| is a lower bound on it and is used when larger. With no fit yet
    (entries_at_fit == 0), any entry at all triggers a fit.
    """
    if entries_at_fit <= 0:
        return entries_now > 0
    if inserts > 0 and inserted_since_fit >= inserts:
        return True
    changed = max(changed_since_fit, abs(entries_now - entries_at_fit))
    return changed > change * entries_at_fit


def likely_hit(predictors: Iterable[MatchPredictor | None], embedding: npt.ArrayLike) -> bool:
    """The admission question across every scope a lookup reads (a tenant's own, and "shared" when
    opted in): True when any scope's predictor says likely, and True when a scope has no fit yet
    (unknown is not a miss: search). False only when every scope was asked and all said no."""
    return any(predictor is None or predictor.predict(embedding) for predictor in predictors)
