"""NIRVANA's match predictor (5.2): will the vector search find a close enough match?

NIRVANA trains scikit-learn's SGDOneClassSVM (nu = 0.001, section 6) on every prompt embedding
in the cache and asks it, before searching, whether a query is *likely* to match; a predicted
miss skips the search. The paper fixes the model and nu and leaves the features and the
decision threshold open. Measured on DiffusionDB prompts embedded with all-MiniLM-L6-v2 (cache:
the first 2000 prompts; queries: the next 500; truth: the exact nearest neighbour passes
nirvana-t2t's lowest row, 0.65), a linear one-class SVM on the raw embeddings reaches only
precision 0.47 at recall 0.95 (41% of queries are true hits; sklearn's own threshold calls
everything a hit), so this module fixes the open choices as follows:

1. Feature scaling: embeddings are L2-normalised, the geometry of the cosine lookup.
2. Feature map: the empirical RBF kernel map over *landmarks*, the scope's cached embeddings
   (the most recent `max_landmarks`, MoDM 5.4: over 90% of hits reuse items cached within
   four hours): phi_j(x) = exp(-gamma * |x - l_j|^2) = exp(-2 gamma (1 - cos(x, l_j))).
   NIRVANA "effectively overfits the model to the existing prompt embedding space"; a narrow
   kernel (gamma = 120) does exactly that.
3. The one-class SVM is SGDOneClassSVM(nu) on those features, warm-started at uniform weights
   (the Parzen-window limit of the kernel one-class SVM, which SGD otherwise needs hundreds of
   epochs to approach from zero on this data).
4. Decision threshold: the boundary is moved from the SVM's training support out to the
   similarity the lookup needs. The score is read as a *soft nearest-neighbour similarity*,
       s(x) = 1 + (log sum_j w_j phi_j(x) - log median(w)) / (2 gamma),
   which equals cos(x, l) when one landmark l of median weight dominates; the predictor says
   "likely hit" when s(x) >= threshold - margin, threshold being the k table's lowest row.
   Because the sum only adds to the nearest landmark's term, a query with a landmark above the
   threshold passes whenever weights are near uniform (recall ~1 over the landmarks).

Measured the same way (`python -m bench.predictor`): precision 0.986, recall 1.000, 58% of searches
skipped (of the 58.6% that would miss); 4000 cached / 1000 queries: 0.986 / 1.000 / 45%. Beyond
`max_landmarks` the predictor only knows the newest entries and recall falls (2000 cached, 1000
landmarks: 0.83); `margin` trades it back for precision (0.1: recall 0.98, precision 0.62).

Serialised without pickle (a versioned header, then arrays), so fits stored in Postgres stay
readable across library upgrades. No I/O here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.linear_model import SGDOneClassSVM

NU = 0.001
"""NIRVANA 6: SGDOneClassSVM with nu = 0.001."""

RETRAIN_CHANGE = 0.05
"""NIRVANA 5.2: retrain when the cached embeddings changed by more than 5%."""

GAMMA = 120.0
"""RBF width on unit vectors. Measured (cache 2000, 500 queries, MiniLM): gamma 30 -> precision
0.90, 60 -> 0.963, 120 -> 0.986, 240 -> 0.99, all at recall 1.0 over the landmarks; 120 keeps the
soft maximum within log(4096)/240 = 0.035 similarity of the hard one."""

MAX_LANDMARKS = 4096
"""Landmarks kept per fit: 4096 x 384 float32 = 6.3 MB, about 0.2 ms per prediction on one core."""

EPOCHS = 10
"""SGD epochs from the uniform warm start (loss settles within a few; NIRVANA 5.4 reports 0.04 s
to retrain 10k records, so the fit must stay cheap)."""

MAX_TRAINING_ROWS = 1024
"""SGD trains on at most this many landmarks (features stay all landmarks): 1024 x 4096 float64 = 32 MB."""

_MAGIC = b"RPMP"
_FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sHI")  # magic, format version, JSON length

FloatArray = npt.NDArray[np.float64]


@cache
def _blas_controller() -> Any:
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]  # scikit-learn's dependency

    return ThreadpoolController()


def _single_threaded_blas() -> AbstractContextManager[object]:
    """A query is a matrix-vector product: BLAS threads cost far more than they save there (measured on
    2 cores, OpenBLAS 0.3.31, 2000 landmarks: 12 ms per prediction threaded, 0.1 ms on one thread)."""
    limit: AbstractContextManager[object] = _blas_controller().limit(limits=1, user_api="blas")
    return limit


def _unit_rows(embeddings: npt.ArrayLike) -> npt.NDArray[np.float32]:
    matrix = np.atleast_2d(np.asarray(embeddings, dtype=np.float32))
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: npt.NDArray[np.float32] = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


@dataclass(frozen=True, eq=False)
class MatchPredictor:
    """A fitted predictor. `predict` is cheap and pure; `to_bytes`/`from_bytes` round-trip exactly.

    landmarks: (m, d) unit rows; log_weights: (m,) log of the SVM weights; threshold: the lookup's
    lowest passing similarity; margin: how far below it a soft similarity still counts as a hit.
    A predictor with no landmarks (an empty cache) predicts a miss for everything.
    """

    landmarks: npt.NDArray[np.float32]
    log_weights: FloatArray
    gamma: float
    threshold: float
    margin: float = 0.0
    nu: float = NU

    @property
    def dim(self) -> int:
        return int(self.landmarks.shape[1])

    @property
    def size(self) -> int:
        """Number of landmarks (cached embeddings the fit kept)."""
        return int(self.landmarks.shape[0])

    def soft_similarity(self, embeddings: npt.ArrayLike) -> FloatArray:
        """s(x) for each row (see the module docstring); -inf with no landmarks."""
        queries = _unit_rows(embeddings)
        if queries.shape[1] != self.dim:
            raise ValueError(
                f"embedding has {queries.shape[1]} dimensions; this predictor was fitted on {self.dim}"
            )
        if self.size == 0:
            return np.full(queries.shape[0], -np.inf)
        with _single_threaded_blas():
            cosine = (queries @ self.landmarks.T).astype(np.float64)
        logits = self.log_weights + 2.0 * self.gamma * (cosine - 1.0)
        peak = logits.max(axis=1)
        log_sum = peak + np.log(np.exp(logits - peak[:, None]).sum(axis=1))
        reference = float(np.median(self.log_weights))
        result: FloatArray = 1.0 + (log_sum - reference) / (2.0 * self.gamma)
        return result

    def predict_many(self, embeddings: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """For each row: True when a match passing the threshold is likely."""
        result: npt.NDArray[np.bool_] = self.soft_similarity(embeddings) >= self.threshold - self.margin
        return result

    def predict(self, embedding: npt.ArrayLike) -> bool:
        """True when the vector search is likely to find a match passing the threshold."""
        return bool(self.predict_many(embedding)[0])

    def to_bytes(self) -> bytes:
        """Versioned header (JSON) + landmarks (float32 LE) + log weights (float64 LE). No pickle."""
        header = json.dumps(
            {
                "kind": "kernel-ocsvm",
                "m": self.size,
                "d": self.dim,
                "gamma": self.gamma,
                "threshold": self.threshold,
                "margin": self.margin,
                "nu": self.nu,
            },
            sort_keys=True,
        ).encode()
        return b"".join(
            (
                _HEADER.pack(_MAGIC, _FORMAT_VERSION, len(header)),
                header,
                np.ascontiguousarray(self.landmarks, dtype="<f4").tobytes(),
                np.ascontiguousarray(self.log_weights, dtype="<f8").tobytes(),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> MatchPredictor:
        """Read what `to_bytes` wrote. Raises ValueError on another format or a truncated blob."""
        if len(data) < _HEADER.size:
            raise ValueError("not a match predictor: too short")
        magic, version, header_len = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise ValueError("not a match predictor: bad magic")
        if version != _FORMAT_VERSION:
            raise ValueError(f"match predictor format {version} is not readable by this version (reads 1)")
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
        log_weights = np.frombuffer(data, dtype="<f8", count=m, offset=offset + m * d * 4).astype(np.float64)
        return cls(
            landmarks=landmarks,
            log_weights=log_weights,
            gamma=float(header["gamma"]),
            threshold=float(header["threshold"]),
            margin=float(header["margin"]),
            nu=float(header["nu"]),
        )


def fit_predictor(
    embeddings: npt.ArrayLike,
    *,
    threshold: float,
    dim: int | None = None,
    nu: float = NU,
    gamma: float = GAMMA,
    max_landmarks: int = MAX_LANDMARKS,
    epochs: int = EPOCHS,
    max_training_rows: int = MAX_TRAINING_ROWS,
    margin: float = 0.0,
    random_state: int = 0,
) -> MatchPredictor:
    """Fit on a scope's cached embeddings, most recently used first (only the first `max_landmarks` are kept).

    `threshold` is the similarity a lookup must pass to be a hit (ThresholdTable.lowest_similarity).
    `dim` is needed only for an empty cache. Deterministic for a given `random_state`.
    Measured with `python -m bench.predictor` (DiffusionDB prompts, MiniLM embeddings).
    """
    points = _unit_rows(embeddings)[:max_landmarks] if np.size(embeddings) else None
    if points is None or points.shape[0] == 0:
        if dim is None:
            raise ValueError("fitting on no embeddings needs dim")
        return MatchPredictor(np.zeros((0, dim), dtype=np.float32), np.zeros(0), gamma, threshold, margin, nu)
    m = points.shape[0]
    rng = np.random.default_rng(random_state)
    rows = points if m <= max_training_rows else points[rng.choice(m, max_training_rows, replace=False)]
    features = np.exp(2.0 * gamma * ((rows @ points.T).astype(np.float64) - 1.0))
    svm = SGDOneClassSVM(nu=nu, max_iter=epochs, tol=None, random_state=random_state)
    svm.fit(features, coef_init=np.ones(m), offset_init=np.ones(1))
    weights = np.asarray(svm.coef_, dtype=np.float64).ravel()
    top = float(weights.max())
    # A degenerate fit (no positive weight) falls back to the uniform warm start; a non-positive
    # weight becomes a vanishing term rather than a log of zero.
    log_weights = np.log(np.maximum(weights, top * 1e-12)) if top > 0 else np.zeros(m)
    return MatchPredictor(points.copy(), log_weights, gamma, threshold, margin, nu)


def needs_retrain(
    entries_at_fit: int,
    entries_now: int,
    changed_since_fit: int,
    *,
    change: float = RETRAIN_CHANGE,
) -> bool:
    """NIRVANA 5.2: retrain when more than `change` (5%) of the cached embeddings changed since the fit.

    changed_since_fit counts entries added plus entries removed since the fit; the net size change
    |entries_now - entries_at_fit| is a lower bound on it and is used when larger. With no fit yet
    (entries_at_fit == 0), any entry at all triggers a fit.
    """
    if entries_at_fit <= 0:
        return entries_now > 0
    changed = max(changed_since_fit, abs(entries_now - entries_at_fit))
    return changed > change * entries_at_fit


def likely_hit(predictors: Iterable[MatchPredictor | None], embedding: npt.ArrayLike) -> bool:
    """The admission question across every scope a lookup reads (a tenant's own, and "shared" when
    opted in): True when any scope's predictor says likely, and True when a scope has no fit yet
    (unknown is not a miss: search). False only when every scope was asked and all said no."""
    return any(predictor is None or predictor.predict(embedding) for predictor in predictors)
