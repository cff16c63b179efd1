"""Measurement: what the service costs and what its caching buys, measured on a running stack, in a
simulator that runs the service's own policy code (jobs/) at scales one machine cannot hold, and on the
quality lab. Stands on every floor but reprise; the `reprise bench ...` commands (reprise/commands/)
parse the options and call in here. Each package says what it measures and the JSON its command
writes with `--json`; the results kept in the repository are under `bench/results/`.

    workload/  what the benchmarks send: prompts files and arrival processes (trace), the read
               workload (reads), a held-out trace (heldout), a trace's prompt embeddings (embeddings)
    run/       what a replay and a simulation share: the profile a run measures, the models' costs
               (`reprise bench runtime`), each request's outcome, the report and its JSON contract,
               figures, the agreement of two reports, the options both commands take
    live/      against a running stack: `reprise bench replay`, `streams`, `reads`, the demo of
               `make run`, and the stack's own record of a replay
    sim/       the simulators: `reprise bench simulate` (the serving stack's discrete-event model, with
               MoDM's pool monitor and DiffServe's cascade), the read side (`reprise bench reads
               --simulate`) and the video cache (FlexCache)
    cache/     the cache's decision path on the configured database: the index at scale (`reprise bench
               cache`), admission (`reprise bench admission`), the match predictor
    video/     FlexCache in figures (`reprise bench video`): compression of cached video states, video
               traces, hit rate and throughput through the simulator
    quality/   the judge's quality: NIRVANA's k profile (`reprise profile k`), the lab's models
               (`reprise lab quality`), DiffServe's discriminator (`reprise cascade train`)
    chaos/     faults against a stack (`reprise bench chaos`): nothing accepted lost, nothing done twice

Imports point down this list's dependency order: workload <- run <- quality <- live <- sim <- (cache,
video); chaos stands alone.

The workloads the benchmarks, tests and README commands read live in `bench/data/` (their provenance
in `bench/data/README.md`): `DATA_DIR` is that folder, found from this file, never from the checkout's
surroundings."""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
PROMPTS_5K = DATA_DIR / "prompts" / "diffusiondb-first-5k.txt"
ARRIVALS_DIR = DATA_DIR / "arrivals"
