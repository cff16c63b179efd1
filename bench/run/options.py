"""The options the bench commands share, from their raw command-line values.

Sizes ("1GiB"), comma lists, batch sizes, the monitor mode, and the workload options
(bench.workload.trace) that `reprise bench replay` and `reprise bench simulate` take alike, so that
a replay and its simulation describe the same requests. A bad value raises ValueError naming the option;
`guarded` turns it into one line and exit status 2.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from bench.workload.trace import (
    DEFAULT_PROMPTS,
    ArrivalKind,
    ArrivalSpec,
    PromptOrder,
    Workload,
    build_workload,
    load_prompts,
)
from core.vocabulary import Allocator, MonitorMode, Role

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_allocator(text: str) -> Allocator:
    """--allocator: modm or diffserve."""
    try:
        return Allocator(text.strip().lower())
    except ValueError:
        raise ValueError(f"--allocator {text!r}: choose {' or '.join(a.value for a in Allocator)}") from None


def parse_size(text: str) -> int:
    """'1GiB', '256MiB', '64M', '1048576' -> bytes (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (e.g. 1GiB, 256MiB, 1048576)")
    unit = (match.group(2) or "").upper()[:1]
    return int(float(match.group(1)) * _UNITS[unit if unit != "B" else ""])


def parse_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


class PlatformHost(StrEnum):
    """Where a replay's platform work ran (bench.sim.platform): on the cores its model calls ran on
    (shared), or on cores beside the accelerators (beside)."""

    SHARED = "shared"
    BESIDE = "beside"


def parse_platform_host(text: str) -> PlatformHost:
    """--platform-host: shared or beside."""
    try:
        return PlatformHost(text.strip().lower())
    except ValueError:
        raise ValueError(f"--platform-host {text!r}: choose shared or beside") from None


def parse_batch_sizes(text: str) -> list[int]:
    """--batch '1,2,4,8,16' -> [1, 2, 4, 8, 16]: jobs per batch, each at least 1."""
    try:
        sizes = [int(part) for part in parse_list(text)]
    except ValueError:
        raise ValueError(f"--batch {text!r}: a comma list of batch sizes, e.g. 1,2,4,8,16") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--batch {text!r}: batch sizes are whole numbers of at least 1")
    return sizes


def parse_batch_model(text: str) -> Role:
    """--model: the model `bench runtime --batch` runs, large or small."""
    if text not in (Role.LARGE, Role.SMALL):
        raise ValueError(f"--model {text!r}: choose large or small")
    return Role(text)


def parse_monitor(text: str) -> MonitorMode | None:
    """'off' -> None (a fixed allocation); 'quality' or 'throughput' -> that mode (MoDM 5.3)."""
    if text == "off":
        return None
    try:
        return MonitorMode(text)
    except ValueError:
        raise ValueError(f"--monitor {text!r}: choose off, quality or throughput") from None


def guarded(main: Callable[[], int]) -> int:
    """Run a command body; a bad input (any ValueError: trace, costs, table, option) prints one
    line and gives exit status 2 instead of a traceback."""
    try:
        return main()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def workload_options(
    trace: Path | None,
    arrivals: Path | None,
    process: str | None,
    order: str,
    rate: float | None,
    concurrency: int,
    time_scale: float,
    limit: int | None,
    seed: int,
) -> WorkloadOptions:
    """WorkloadOptions from the commands' raw option values (ValueError names a bad one)."""
    try:
        kind = ArrivalKind(process) if process is not None else None
    except ValueError:
        raise ValueError(f"--process {process!r}: choose closed, poisson or file") from None
    try:
        prompt_order = PromptOrder(order)
    except ValueError:
        raise ValueError(f"--order {order!r}: choose trace or file-index") from None
    return WorkloadOptions(
        trace=trace if trace is not None else DEFAULT_PROMPTS,
        arrivals=arrivals,
        process=kind,
        order=prompt_order,
        rate=rate,
        concurrency=concurrency,
        time_scale=time_scale,
        limit=limit,
        seed=seed,
    )


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    """The options both commands share to say what to send and when."""

    trace: Path
    arrivals: Path | None = None
    process: ArrivalKind | None = None
    order: PromptOrder = PromptOrder.TRACE
    rate: float | None = None
    concurrency: int = 4
    time_scale: float = 1.0
    limit: int | None = None
    seed: int = 0

    def spec(self, *, rate: float | None = None) -> ArrivalSpec:
        """The arrival process: as given, else poisson with a rate, file with --arrivals, closed otherwise."""
        rate = rate if rate is not None else self.rate
        kind = self.process
        if rate is not None and (kind is None or kind is ArrivalKind.POISSON):
            kind = ArrivalKind.POISSON
        elif kind is None:
            kind = ArrivalKind.FILE if self.arrivals is not None else ArrivalKind.CLOSED
        return ArrivalSpec(
            kind=kind,
            rate_rps=rate,
            path=self.arrivals,
            time_scale=self.time_scale,
            concurrency=self.concurrency,
            order=self.order,
            seed=self.seed,
        )

    def workload(self, *, rate: float | None = None) -> Workload:
        return build_workload(load_prompts(self.trace), self.spec(rate=rate), limit=self.limit)


@dataclass(frozen=True, slots=True)
class SimulateOptions:
    """What `reprise bench simulate` was asked for, parsed (bench.run.options)."""

    workload: WorkloadOptions
    profiles: tuple[str, ...]
    costs: Path | None = None
    batch_table: Path | None = None  # a `bench runtime --batch --json` output: its batch slowdowns
    step_cache_costs: Path | None = None  # `bench runtime --json` under the stack's REPRISE_STEP_CACHE
    cache_bytes: int | None = None
    large_workers: int = 3
    small_workers: int = 1
    autoscale: str | None = None  # MIN:MAX workers (bench.sim.autoscale); None: a fixed fleet
    sweep: bool = False
    sizes: tuple[int, ...] = ()
    policies: tuple[str, ...] = ()
    rates: tuple[float, ...] = ()
    k_table: str | None = None
    quality_profile: Path | None = None  # `reprise profile k --json`; None: the lab's shipped profiles
    quality_from: Path | None = None  # a replay's JSON: its audited drops refit the quality model's bins
    switch_s: float = 0.0
    jobs: int = 1
    json_path: Path | None = None
    plots: Path | None = None
    compare: Path | None = None
    progress: bool = True
    monitor: MonitorMode | None = None  # MoDM's global monitor in this mode; None: fixed allocation
    monitor_period_s: float | None = None  # None: settings.monitor_period_s
    allocator: Allocator = Allocator.DIFFSERVE  # cascade profiles: the MILP, or a fixed threshold (modm)
    cascade_pair: str = "sd15"  # DiffServe 4.1's light-heavy pair whose latencies the cascade runs at
    cascade_profile: Path | None = None  # `reprise cascade train --json`; None: the lab's shipped one
    no_throughput: bool = False  # --compare leaves the speedup unchecked, and says so
    platform_costs: Path | None = None  # a replay's JSON whose stages price each job's platform work
    platform_host: PlatformHost = PlatformHost.SHARED  # every replay so far: the stack on 2 shared CPU cores


_WORKLOAD_OPTIONS = (
    "trace",
    "arrivals",
    "process",
    "order",
    "rate",
    "concurrency",
    "time_scale",
    "limit",
    "seed",
)
"""The command-line options that say what to send and when, in `workload_options`' order."""


def simulate_options(given: Mapping[str, Any]) -> SimulateOptions:
    """`reprise bench simulate`'s raw options, each under its parameter's name, as SimulateOptions: the
    workload's read as replay reads them, profiles, sizes, lists and modes parsed from their text, and
    every other option (named as its field) as given."""
    parsed: dict[str, Any] = {
        "workload": workload_options(*(given[name] for name in _WORKLOAD_OPTIONS)),
        "profiles": tuple(parse_list(given["profile"])),
        "cache_bytes": parse_size(given["cache_bytes"]) if given["cache_bytes"] else None,
        "sizes": tuple(parse_size(size) for size in parse_list(given["sizes"] or "")),
        "policies": tuple(parse_list(given["policies"] or "")),
        "rates": tuple(float(r) for r in parse_list(given["rates"] or "")),
        "monitor": parse_monitor(given["monitor"]),
        "allocator": parse_allocator(given["allocator"]),
        "platform_host": parse_platform_host(given["platform_host"]),
    }
    names = {field.name for field in fields(SimulateOptions)}
    as_given = {name: value for name, value in given.items() if name in names and name not in parsed}
    return SimulateOptions(**parsed, **as_given)
