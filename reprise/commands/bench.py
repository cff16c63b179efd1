"""`reprise bench ...`: benchmarks. Each command measures with real components and writes JSON."""

from __future__ import annotations

import typer

bench_app = typer.Typer(help="Benchmarks (runtime, cache, replay, simulate).", no_args_is_help=True)
