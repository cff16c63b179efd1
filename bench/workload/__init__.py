"""What the benchmarks send, built the same way for a replay and for its simulation.

    trace       a prompts file (the DiffusionDB 5k in bench/data/ by default), an arrival process
                (closed loop, Poisson, or an arrivals CSV) and the requests they make; `describe()`
                gives a report's `trace` and `arrivals` fields
    reads       a skewed, decaying read workload in the shape of LatentBox's production trace (3.1.1)
    heldout     `python -m bench.workload.heldout OUT`: a held-out trace with a chosen share of hits,
                for checking the simulator against the live stack
    embeddings  a trace's prompt embeddings with the configured text embedder, computed once and kept
                under `<data_dir>/bench/embeddings/`

Measures nothing itself and writes no JSON: the `trace` and `arrivals` fields of a report (bench.run)
say which workload a figure used.
"""
