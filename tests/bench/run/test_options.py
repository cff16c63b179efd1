"""The bench commands' option handling: sizes, lists, and which arrival process the options select."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run.options import (
    PlatformHost,
    WorkloadOptions,
    guarded,
    parse_list,
    parse_platform_host,
    parse_size,
    workload_options,
)
from bench.workload.trace import DEFAULT_PROMPTS, ArrivalKind, PromptOrder
from core.errors import TraceError


@pytest.mark.parametrize(
    ("text", "size"),
    [("1048576", 2**20), ("64MiB", 64 * 2**20), ("1GiB", 2**30), ("1.5G", 3 * 2**29), ("512k", 512 * 1024)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_parse_size_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_parse_list() -> None:
    assert parse_list(" nirvana, modm ,,") == ["nirvana", "modm"]


def test_the_process_follows_the_options() -> None:
    base = WorkloadOptions(trace=DEFAULT_PROMPTS)
    assert base.spec().kind is ArrivalKind.CLOSED
    assert WorkloadOptions(trace=DEFAULT_PROMPTS, rate=2.0).spec().kind is ArrivalKind.POISSON
    with_file = WorkloadOptions(trace=DEFAULT_PROMPTS, arrivals=Path("a.csv"))
    assert with_file.spec().kind is ArrivalKind.FILE
    assert with_file.spec(rate=1.0).kind is ArrivalKind.POISSON  # a rate sweep keeps the file's prompt order
    forced = WorkloadOptions(trace=DEFAULT_PROMPTS, arrivals=Path("a.csv"), process=ArrivalKind.CLOSED)
    assert forced.spec().kind is ArrivalKind.CLOSED


def test_workload_options_name_a_bad_value() -> None:
    options = workload_options(None, None, None, "file-index", None, 4, 1.0, None, 0)
    assert options.trace == DEFAULT_PROMPTS and options.order is PromptOrder.FILE_INDEX
    with pytest.raises(ValueError, match="--process 'bursty'"):
        workload_options(None, None, "bursty", "trace", None, 4, 1.0, None, 0)


def test_guarded_turns_bad_input_into_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    def bad() -> int:
        raise TraceError("prompts file x is empty")

    assert guarded(bad) == 2
    assert "error: prompts file x is empty" in capsys.readouterr().err
    assert guarded(lambda: 0) == 0


def test_the_platform_host_is_shared_or_beside() -> None:
    assert parse_platform_host(" Beside ") is PlatformHost.BESIDE
    assert parse_platform_host("shared") is PlatformHost.SHARED
    with pytest.raises(ValueError, match="--platform-host 'gpu': choose shared or beside"):
        parse_platform_host("gpu")
