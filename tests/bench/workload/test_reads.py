"""The read workload (bench.workload.reads): deterministic, skewed (O1), decaying after birth (O2) with a
long tail (O4), and causal (no read before its object's birth)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.workload.reads import ReadTraceSpec, births, decay_scale, read_ages, read_trace, trace_statistics

SPEC = ReadTraceSpec(objects=2000, reads=40_000, seed=3)


def test_a_seed_gives_one_trace() -> None:
    assert np.array_equal(read_trace(SPEC), read_trace(SPEC))
    assert not np.array_equal(read_trace(SPEC), read_trace(ReadTraceSpec(objects=2000, reads=40_000, seed=4)))


def test_no_object_is_read_before_its_birth() -> None:
    trace = read_trace(SPEC)
    assert trace.shape == (SPEC.reads,) and trace.min() >= 0 and trace.max() < SPEC.objects
    assert np.all(read_ages(SPEC, trace) >= 0)
    born = births(SPEC)
    assert np.count_nonzero(born == 0) == 200  # 10% exist when the trace starts
    assert born[-1] < SPEC.reads and np.all(np.diff(born) >= 0)


def test_popularity_is_skewed() -> None:
    stats = trace_statistics(read_trace(SPEC), SPEC.objects)
    assert stats["top_10pct_share"] > 0.5  # uniform popularity would give about 0.10
    assert stats["top_1pct_share"] > 0.2
    flat = trace_statistics(read_trace(ReadTraceSpec(objects=2000, reads=40_000, zipf=0.0, seed=3)), 2000)
    assert flat["top_10pct_share"] < 0.3 < stats["top_10pct_share"]


def test_reads_come_soon_after_birth_with_a_long_tail() -> None:
    trace = read_trace(SPEC)
    ages = read_ages(SPEC, trace)
    later = births(SPEC)[trace] > 0  # reads of objects born during the trace
    assert np.median(ages[later]) < SPEC.reads / 10  # fast post-birth decay (O2)
    assert np.mean(ages[later] > SPEC.reads / 4) > 0.02  # and late re-reads keep coming (O4)


def test_a_slower_decay_spreads_reads_over_older_objects() -> None:
    slow = ReadTraceSpec(objects=2000, reads=40_000, decay_drop=2.0, seed=3)
    assert decay_scale(slow) > decay_scale(SPEC)
    fast_age = np.median(read_ages(SPEC, read_trace(SPEC)))
    slow_age = np.median(read_ages(slow, read_trace(slow)))
    assert slow_age > 2 * fast_age


def test_the_statistics_count_what_they_say() -> None:
    # 100 objects: object 7 is read 50 times, objects 10..59 once each, the others never.
    trace = np.array([7] * 50 + list(range(10, 60)), dtype=np.int64)
    stats = trace_statistics(trace, 100)
    assert stats["top_1pct_share"] == 0.5  # the top 1% is one object: object 7
    assert stats["top_10pct_share"] == round((50 + 9) / 100, 4)
    assert stats["objects_read"] == 51
    assert stats["read_once_share"] == round(50 / 51, 4)
    assert stats["under_ten_share"] == round(50 / 51, 4)


@pytest.mark.parametrize(
    "bad",
    [
        {"objects": 0, "reads": 10},
        {"objects": 10, "reads": 0},
        {"objects": 10, "reads": 10, "zipf": -1.0},
        {"objects": 10, "reads": 10, "initial_share": 0.0},
        {"objects": 10, "reads": 10, "decay_drop": 1.0},
    ],
)
def test_a_trace_needs_objects_reads_and_a_decay(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ReadTraceSpec(**bad)
