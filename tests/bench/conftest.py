"""Fixtures for the benchmark: small slices of the shared trace, embedded once per session with
the real all-MiniLM-L6-v2 into a temporary data dir (which later CLI runs reuse from disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.workload.embeddings import TraceEmbeddings, configured_embedder, trace_embeddings
from bench.workload.trace import DEFAULT_PROMPTS, ArrivalSpec, Prompts, Workload, build_workload, load_prompts
from core.settings import Settings, load_settings

DISTINCT = 30  # distinct prompts of a slice; small enough to embed in about a second


def _distinct_prompts(count: int) -> list[str]:
    seen: list[str] = []
    for line in load_prompts(DEFAULT_PROMPTS).lines:
        if line.strip() and line not in seen:
            seen.append(line)
        if len(seen) == count:
            return seen
    raise AssertionError("the shared trace has fewer distinct prompts than the tests need")


@pytest.fixture(scope="session")
def bench_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Default settings with data (and so the embedding cache) in a temp dir."""
    return load_settings(data_dir=tmp_path_factory.mktemp("bench-data"))


@pytest.fixture(scope="session")
def repeat_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 prompts: 30 distinct real prompts, then the same 30 again (exact repeats, in order)."""
    prompts = _distinct_prompts(DISTINCT)
    path = tmp_path_factory.mktemp("traces") / "repeats.txt"
    path.write_text("\n".join(prompts + prompts) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def repeat_prompts(repeat_trace: Path) -> Prompts:
    return load_prompts(repeat_trace)


@pytest.fixture(scope="session")
def repeat_workload(repeat_prompts: Prompts) -> Workload:
    """Closed loop, 4 clients: a repeat arrives after its original has completed."""
    return build_workload(repeat_prompts, ArrivalSpec())


@pytest.fixture(scope="session")
def repeat_embeddings(bench_settings: Settings, repeat_prompts: Prompts) -> TraceEmbeddings:
    return trace_embeddings(
        repeat_prompts,
        range(len(repeat_prompts)),
        configured_embedder(bench_settings),
        cache_dir=bench_settings.data_dir / "bench" / "embeddings",
    )
