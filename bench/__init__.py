"""Measurement: the runtime, cache and predictor benchmarks, trace replay against a running stack, and
the simulator that runs the same policy code (jobs/) on a trace. Stands on every floor but reprise.

The workloads the benchmarks, tests and README commands read live in `bench/data/` (their provenance
in `bench/data/README.md`): `DATA_DIR` is that folder, found from this file, never from the checkout's
surroundings."""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
PROMPTS_5K = DATA_DIR / "prompts" / "diffusiondb-first-5k.txt"
ARRIVALS_DIR = DATA_DIR / "arrivals"
