"""How well the match predictor stands in for the vector search, on real prompts.

    python -m bench.predictor [--cache 2000] [--queries 500] [--json FILE]

Embeds DiffusionDB prompts with the configured text embedder (MiniLM by default), caches the first
`--cache` prompts, asks about the next `--queries`, and compares the predictor's answer with the
truth: the exact nearest cached prompt passes the configured k table's lowest row (the lookup would
hit). Reports precision (NIRVANA's c_p), recall, the share of searches skipped, fit and prediction
times; then the same for the paper's literal setup (linear SGDOneClassSVM, nu = 0.001, on the raw
embeddings, with sklearn's own threshold and with the threshold that keeps recall at 0.95), and for
predictors capped below the cache size (landmarks = the most recent prompts only).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.linear_model import SGDOneClassSVM

from core.settings import get_settings
from jobs.policies.k_selection import parse_table
from jobs.policies.predictor import NU, fit_predictor

PROMPTS = Path("/work/shared/data/prompts/diffusiondb-first-5k.txt")
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Scores:
    name: str
    precision: float
    recall: float
    skipped: float  # share of queries answered "miss" (no search)
    fit_ms: float = 0.0
    predict_us: float = 0.0


def _scores(
    name: str, predicted: Bools, truth: Bools, fit_ms: float = 0.0, predict_us: float = 0.0
) -> Scores:
    tp = int((predicted & truth).sum())
    fp = int((predicted & ~truth).sum())
    fn = int((~predicted & truth).sum())
    return Scores(
        name,
        round(tp / (tp + fp), 4) if tp + fp else 0.0,
        round(tp / (tp + fn), 4) if tp + fn else 0.0,
        round(float(1 - predicted.mean()), 4),
        round(fit_ms, 1),
        round(predict_us, 1),
    )


def embed(prompts: list[str], cache_file: Path | None) -> npt.NDArray[np.float32]:
    if cache_file is not None and cache_file.exists():
        return np.asarray(np.load(cache_file), dtype=np.float32)
    from workers.runtime.embedders.factory import build_text_embedder

    vectors = np.asarray(build_text_embedder(get_settings()).embed_text(prompts), dtype=np.float32)
    if cache_file is not None:
        np.save(cache_file, vectors)
    return vectors


def measure(
    vectors: npt.NDArray[np.float32], n_cache: int, n_queries: int, threshold: float
) -> dict[str, Any]:
    cached, queries = vectors[:n_cache], vectors[n_cache : n_cache + n_queries]
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    truth: Bools = (unit[n_cache : n_cache + n_queries] @ unit[:n_cache].T).max(axis=1) > threshold
    results: list[Scores] = []

    for max_landmarks in (4096, n_cache // 2, n_cache // 4):
        started = time.perf_counter()
        predictor = fit_predictor(
            cached[::-1], threshold=threshold, max_landmarks=max_landmarks
        )  # newest first
        fit_ms = (time.perf_counter() - started) * 1000
        predictor.predict_many(queries[:10])  # warm up BLAS before timing
        started = time.perf_counter()
        predicted = np.array([predictor.predict(q) for q in queries])
        predict_us = (time.perf_counter() - started) / len(queries) * 1e6
        name = f"kernel OCSVM, {predictor.size} landmarks"
        results.append(_scores(name, predicted, truth, fit_ms, predict_us))

    started = time.perf_counter()
    linear = SGDOneClassSVM(nu=NU, random_state=0).fit(cached)  # NIRVANA 6, sklearn defaults otherwise
    fit_ms = (time.perf_counter() - started) * 1000
    decision = linear.decision_function(queries)
    results.append(
        _scores("paper literal: linear SGDOneClassSVM, own threshold", decision >= 0, truth, fit_ms)
    )
    cut = np.quantile(decision[truth], 0.05)  # oracle threshold for recall 0.95 (not available in production)
    results.append(
        _scores("paper literal: linear, oracle threshold for recall 0.95", decision >= cut, truth, fit_ms)
    )
    return {
        "cache": n_cache,
        "queries": n_queries,
        "threshold": threshold,
        "true_hit_rate": round(float(truth.mean()), 4),
        "results": [asdict(r) for r in results],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=Path, default=PROMPTS)
    parser.add_argument("--cache", type=int, default=2000, help="prompts cached (the first N)")
    parser.add_argument("--queries", type=int, default=500, help="prompts asked about (the next N)")
    parser.add_argument("--embeddings", type=Path, help="reuse/store the embeddings in this .npy file")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    prompts = args.prompts.read_text().splitlines()[: args.cache + args.queries]
    threshold = parse_table(get_settings().k_table).lowest_similarity
    report = measure(embed(prompts, args.embeddings), args.cache, args.queries, threshold)
    print(
        f"cache {report['cache']}, queries {report['queries']}, hit threshold {threshold}, "
        f"true hit rate {report['true_hit_rate']}"
    )
    for row in report["results"]:
        print(
            f"  {row['name']:<58} precision {row['precision']:.3f}  recall {row['recall']:.3f}  "
            f"skipped {row['skipped']:.3f}  fit {row['fit_ms']:.0f} ms  predict {row['predict_us']:.0f} us"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
