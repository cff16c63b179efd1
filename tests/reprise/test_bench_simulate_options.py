"""`reprise bench simulate` hands its options to bench.run.options.simulate_options by their parameters'
names: every SimulateOptions field must be named by a parameter (or parsed from one), or it would keep
its default whatever the command line said."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

from bench.run.options import PlatformHost, SimulateOptions, simulate_options, workload_options
from core.vocabulary import Allocator, MonitorMode
from reprise.commands.bench import simulate_command

PARSED_FROM = {"workload": "trace", "profiles": "profile"}  # fields read from differently named options


def _defaults() -> dict[str, object]:
    return {
        name: parameter.default.default if hasattr(parameter.default, "default") else parameter.default
        for name, parameter in inspect.signature(simulate_command).parameters.items()
    }


def test_every_field_is_an_option_of_the_command() -> None:
    parameters = set(inspect.signature(simulate_command).parameters)
    missing = [f.name for f in fields(SimulateOptions) if PARSED_FROM.get(f.name, f.name) not in parameters]
    assert missing == []


def test_the_options_are_parsed_as_the_command_gave_them() -> None:
    given = _defaults() | {
        "profile": "vanilla,nirvana",
        "cache_bytes": "1GiB",
        "sizes": "16MiB,1GiB",
        "policies": "lru",
        "rates": "1,2.5",
        "monitor": "quality",
        "allocator": "modm",
        "platform_host": "shared",
        "compare": Path("replay.json"),
        "no_throughput": True,
        "large_workers": 5,
        "json_path": Path("out.json"),
        "seed": 7,
    }
    options = simulate_options(given)
    assert options == SimulateOptions(
        workload=workload_options(None, None, None, "trace", None, 4, 1.0, None, 7),
        profiles=("vanilla", "nirvana"),
        cache_bytes=2**30,
        sizes=(16 * 2**20, 2**30),
        policies=("lru",),
        rates=(1.0, 2.5),
        monitor=MonitorMode.QUALITY,
        allocator=Allocator.MODM,
        platform_host=PlatformHost.SHARED,
        compare=Path("replay.json"),
        no_throughput=True,
        large_workers=5,
        json_path=Path("out.json"),
        progress=True,
    )
