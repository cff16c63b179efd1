"""The read workload (bench.readtrace): deterministic, skewed, decaying, and causal."""

from __future__ import annotations

import numpy as np
import pytest

from bench.readtrace import ReadTraceSpec, births, read_trace, trace_statistics

SPEC = ReadTraceSpec(objects=2000, reads=40_000, seed=3)


def test_a_seed_gives_one_trace() -> None:
    assert np.array_equal(read_trace(SPEC), read_trace(SPEC))
    assert not np.array_equal(read_trace(SPEC), read_trace(ReadTraceSpec(objects=2000, reads=40_000, seed=4)))


def test_no_object_is_read_before_its_birth() -> None:
    trace = read_trace(SPEC)
    assert np.all(births(SPEC)[trace] <= np.arange(SPEC.reads))


def test_popularity_is_skewed() -> None:
    stats = trace_statistics(read_trace(SPEC), SPEC.objects)
    assert stats["top_10pct_share"] > 0.4  # uniform would give 0.10
    flat = trace_statistics(read_trace(ReadTraceSpec(objects=2000, reads=40_000, zipf=0.0, seed=3)), 2000)
    assert flat["top_10pct_share"] < stats["top_10pct_share"]


def test_reads_come_soon_after_birth() -> None:
    trace = read_trace(SPEC)
    ages = np.arange(SPEC.reads) - births(SPEC)[trace]
    later = births(SPEC)[trace] > 0  # objects born during the trace
    assert np.median(ages[later]) < SPEC.reads / 10  # fast post-birth decay (O2)
    assert ages[later].max() > SPEC.reads / 4  # and a long tail of late re-reads (O4)


def test_a_trace_needs_objects_and_reads() -> None:
    with pytest.raises(ValueError):
        ReadTraceSpec(objects=0, reads=10)
