"""The cache's decision path on the configured Postgres + pgvector, without a broker or a stack.

    index      `reprise bench cache`: what the cache index costs at scale: lookup latency and recall
               per scope-size class, an eviction pass (with --churn-rounds, after churn and rebuild)
    fill       filling the index: scopes of skewed sizes, clustered embeddings, near-duplicate queries
    churn      eviction's deletes and inserts, round after round, and their effect on the index
    admission  `reprise bench admission`: admissions per second per admit process, and each stage's cost
    predictor  `python -m bench.cache.predictor [--trace]`: how well the match predictor stands in for
               the vector search (NIRVANA's c_p), alone and in the simulator

JSON contract. `cache --json`: lookup_p50_ms, lookup_p99_ms, recall_at_1, evict_pass_ms, entries, dim,
scopes, by_class [{scope_entries, lookups, p50, p99, recall@1}], then context fields (paths, index
sizes, short, churn...); results in `bench/results/cache/`. `admission --json`: options, embedder,
embed_batch, jobs, admitted, errors, admissions_per_s (per process, per core), cores, load_average_1m,
admission_ms, stages, outcomes; results in `bench/results/admission/`. `predictor --json`: cache,
queries, threshold, true_hit_rate, results; with --trace: cache_bytes, requests, large_step_ms,
profiles.
"""
