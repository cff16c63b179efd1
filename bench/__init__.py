"""Benchmarks: runtime, cache, trace replay and the simulator."""
