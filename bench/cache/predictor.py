"""How well the match predictor stands in for the vector search, on real prompts.

    python -m bench.cache.predictor [--cache 2000] [--queries 500] [--json FILE]
    python -m bench.cache.predictor --trace [--cache-bytes 1GiB] [--json FILE]

Embeds DiffusionDB prompts with the configured text embedder (MiniLM by default), caches the first
`--cache` prompts, asks about the next `--queries`, and compares the predictor's answer with the
truth: the exact nearest cached prompt passes the configured k table's lowest row (the lookup would
hit). Reports precision (NIRVANA's c_p), recall, the share of searches skipped, fit and prediction
times; the same predictor with its fit skipped (zero weights) or its weights uniform; then the
paper's literal setup (linear SGDOneClassSVM, nu = 0.001, on the raw embeddings, with sklearn's own
threshold and with the threshold that keeps recall at 0.95).

`--trace` runs the simulator (bench.sim.simulate) over the whole trace with the nirvana profile with and
without its predictor (nirvana / nirvana-womp) and reports the predictor's precision and recall of
"hit", the lookups it avoided, the hits it lost, and the time: lookups avoided x the lookup cost
against the denoising steps the lost hits would have saved x the large model's step cost.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.linear_model import SGDOneClassSVM

from bench import PROMPTS_5K
from core.settings import get_settings
from jobs.policies.k_selection import configured_table
from jobs.policies.predictor import NU, fit_predictor

PROMPTS = PROMPTS_5K
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

    started = time.perf_counter()
    predictor = fit_predictor(cached[::-1], threshold=threshold)  # newest first
    fit_ms = (time.perf_counter() - started) * 1000
    predictor.predict_many(queries[:10])  # warm up BLAS before timing
    started = time.perf_counter()
    predicted = np.array([predictor.predict(q) for q in queries])
    predict_us = (time.perf_counter() - started) / len(queries) * 1e6
    name = f"Nystroem OCSVM, nu {predictor.nu} (held-out P {predictor.holdout_precision})"
    results.append(_scores(name, predicted, truth, fit_ms, predict_us))
    for label, weights in (
        ("fit skipped (zero weights)", np.zeros(predictor.size)),
        ("uniform weights, same offset and cut", np.full(predictor.size, predictor.weights.mean())),
    ):
        variant = dataclasses.replace(predictor, weights=weights)
        results.append(_scores(label, variant.predict_many(queries), truth))

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


def trace_report(cache_bytes: int, limit: int | None) -> dict[str, Any]:
    """The simulator over the trace, nirvana with and without its predictor (see the docstring)."""
    from bench.run.costs import load_costs
    from bench.run.profiles import build_profile
    from bench.sim.config import SimConfig
    from bench.sim.simulate import run_simulation
    from bench.workload.embeddings import configured_embedder, trace_embeddings
    from bench.workload.trace import ArrivalSpec, build_workload, load_prompts

    settings = get_settings()
    workload = build_workload(load_prompts(PROMPTS), ArrivalSpec(), limit=limit)
    embeddings = trace_embeddings(
        workload.prompts,
        [r.prompt_idx for r in workload.requests],
        configured_embedder(settings),
        cache_dir=settings.data_dir / "bench" / "embeddings",
    )
    costs = load_costs(None)
    rows: dict[str, Any] = {}
    for name in ("nirvana", "nirvana-womp"):
        config = SimConfig(
            build_profile(name, settings), costs, cache_bytes, maintenance_period_s=settings.beat_period_s
        )
        started = time.perf_counter()
        result = run_simulation(workload, config, settings=settings, embeddings=embeddings)
        c = result.counters
        assert c is not None
        called = c.predicted_hit_true + c.predicted_hit_false
        rows[name] = {
            "hit_rate": result.report.hit_rate,
            "compute_saved": result.report.compute_saved,
            "fits": c.predictor_fits,
            "lookups_avoided": c.predicted_misses,
            "hits_lost": c.hits_lost,
            "steps_lost": c.hits_lost_k,
            "precision": round(c.predicted_hit_true / called, 4) if called else None,
            "recall": round(c.predicted_hit_true / (c.predicted_hit_true + c.hits_lost), 4)
            if c.predicted_hit_true + c.hits_lost
            else None,
            "lookup_ms": round(c.search_ms / c.searches, 4) if c.searches else None,
            "wall_s": round(time.perf_counter() - started, 1),
        }
    on = rows["nirvana"]
    on["time_saved_s"] = round(on["lookups_avoided"] * (on["lookup_ms"] or 0.0) / 1000, 3)
    on["time_lost_s"] = round(on["steps_lost"] * costs.large_step_ms / 1000, 3)
    return {
        "cache_bytes": cache_bytes,
        "requests": len(workload.requests),
        "large_step_ms": costs.large_step_ms,
        "profiles": rows,
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
    parser.add_argument("--trace", action="store_true", help="simulate the trace, predictor on and off")
    parser.add_argument("--cache-bytes", default="1GiB", help="with --trace: the cache budget")
    parser.add_argument("--limit", type=int, help="with --trace: only the first N requests")
    args = parser.parse_args(argv)
    if args.trace:
        from bench.run.options import parse_size

        report = trace_report(parse_size(args.cache_bytes), args.limit)
        print(json.dumps(report, indent=2))
        if args.json is not None:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        return

    prompts = args.prompts.read_text().splitlines()[: args.cache + args.queries]
    threshold = configured_table(get_settings()).lowest_similarity
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
