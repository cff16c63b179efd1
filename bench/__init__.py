"""Measurement: the runtime, cache and predictor benchmarks, trace replay against a running stack, and
the simulator that runs the same policy code (jobs/) on a trace. Stands on every floor but reprise."""
