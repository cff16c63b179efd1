"""Prompts files, arrivals CSVs and the arrival processes built from them."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from bench.workload.trace import (
    ArrivalKind,
    ArrivalRow,
    ArrivalSpec,
    PromptOrder,
    build_workload,
    load_prompts,
    parse_arrivals,
    poisson_times,
)
from core.errors import TraceError


def _prompts(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _arrivals(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "arrivals.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_parse_arrivals_reads_rows_skipping_a_header_and_blank_lines() -> None:
    rows = parse_arrivals("arrival_ms,prompt_idx\n636.0,4817\n\n1058.0, 2143\n1058,0\n")
    assert rows == [ArrivalRow(636.0, 4817), ArrivalRow(1058.0, 2143), ArrivalRow(1058.0, 0)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("-1,0\n", "non-negative"),
        ("10,-3\n", "must not be negative"),
        ("10,1,2\n", "expected 'arrival_ms,prompt_idx'"),
        ("10,1\nten,2\n", "expected numbers"),
        ("nan,1\n", "non-negative number"),
        ("\n\n", "no arrivals"),
    ],
)
def test_parse_arrivals_names_the_line_at_fault(text: str, fragment: str) -> None:
    with pytest.raises(TraceError, match=fragment):
        parse_arrivals(text, source="a.csv")


def test_rows_out_of_order_are_sorted_by_time() -> None:
    assert parse_arrivals("10,1\n5,2\n10,3\n") == [ArrivalRow(5, 2), ArrivalRow(10, 1), ArrivalRow(10, 3)]


def test_the_shared_arrivals_files_parse() -> None:
    from bench import ARRIVALS_DIR
    from bench.workload.trace import load_arrivals

    rows = load_arrivals(ARRIVALS_DIR / "azure-shaped-1to8qps.csv")
    assert len(rows) > 1000
    assert all(0 <= row.prompt_idx < 5000 for row in rows)


def test_load_prompts_keeps_empty_lines_so_indices_match_the_file(tmp_path: Path) -> None:
    prompts = load_prompts(_prompts(tmp_path, ["a cat", "", "a dog\r"]))
    assert prompts.lines == ("a cat", "", "a dog")
    assert len(prompts.sha256) == 64


def test_build_workload_skips_empty_prompts_and_renumbers(tmp_path: Path) -> None:
    prompts = load_prompts(_prompts(tmp_path, ["a cat", "  ", "a dog"]))
    workload = build_workload(prompts, ArrivalSpec())
    assert [(r.seq, r.prompt_idx, r.prompt) for r in workload.requests] == [(0, 0, "a cat"), (1, 2, "a dog")]
    assert workload.skipped_empty == 1
    assert all(r.arrival_s is None for r in workload.requests)  # closed loop
    assert workload.describe_arrivals()["process"] == "closed"


def test_file_arrivals_in_trace_order_keep_the_file_times_scaled(tmp_path: Path) -> None:
    prompts = load_prompts(_prompts(tmp_path, [f"prompt {i}" for i in range(5)]))
    csv = _arrivals(tmp_path, "1000,4\n1500,0\n3000,2\n")
    workload = build_workload(prompts, ArrivalSpec(kind=ArrivalKind.FILE, path=csv, time_scale=2.0))
    assert [r.prompt_idx for r in workload.requests] == [0, 1, 2]  # file order: locality kept
    assert [r.arrival_s for r in workload.requests] == [0.0, 1.0, 4.0]
    assert workload.describe_trace()["locality"].startswith("kept")


def test_file_index_order_takes_the_random_prompt_idx(tmp_path: Path) -> None:
    prompts = load_prompts(_prompts(tmp_path, [f"prompt {i}" for i in range(5)]))
    csv = _arrivals(tmp_path, "1000,4\n1500,0\n3000,2\n")
    spec = ArrivalSpec(kind=ArrivalKind.FILE, path=csv, order=PromptOrder.FILE_INDEX)
    workload = build_workload(prompts, spec)
    assert [r.prompt_idx for r in workload.requests] == [4, 0, 2]
    assert workload.describe_trace()["order"] == "file-index"
    assert workload.describe_trace()["locality"].startswith("low")


def test_file_index_beyond_the_trace_is_refused(tmp_path: Path) -> None:
    prompts = load_prompts(_prompts(tmp_path, ["one", "two"]))
    csv = _arrivals(tmp_path, "0,7\n")
    with pytest.raises(TraceError, match="beyond the 2 prompts"):
        build_workload(prompts, ArrivalSpec(kind=ArrivalKind.FILE, path=csv, order=PromptOrder.FILE_INDEX))


def test_poisson_arrivals_are_seeded_and_have_the_asked_rate() -> None:
    times = poisson_times(4000, rate_rps=2.0, seed=7)
    assert times == poisson_times(4000, rate_rps=2.0, seed=7)
    assert times[0] == 0.0 and all(b >= a for a, b in itertools.pairwise(times))
    assert np.mean(np.diff(times)) == pytest.approx(0.5, rel=0.05)


def test_poisson_workload_and_limit(tmp_path: Path) -> None:
    prompts = load_prompts(_prompts(tmp_path, [f"prompt {i}" for i in range(10)]))
    workload = build_workload(prompts, ArrivalSpec(kind=ArrivalKind.POISSON, rate_rps=1.0), limit=4)
    assert len(workload.requests) == 4
    assert workload.describe_arrivals()["rate_rps"] == 1.0


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"kind": ArrivalKind.POISSON}, "positive rate"),
        ({"kind": ArrivalKind.FILE}, "arrivals CSV"),
        ({"order": PromptOrder.FILE_INDEX}, "arrivals CSV"),
        ({"time_scale": 0.0}, "time_scale"),
        ({"concurrency": 0}, "concurrency"),
    ],
)
def test_arrival_spec_refuses_incomplete_options(spec: dict[str, object], fragment: str) -> None:
    with pytest.raises(TraceError, match=fragment):
        ArrivalSpec(**spec)  # type: ignore[arg-type]
