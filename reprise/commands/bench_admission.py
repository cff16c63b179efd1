"""`reprise bench admission`, registered on the bench command group (reprise/commands/bench.py is full)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from core.settings import get_settings
from reprise.commands.bench import bench_app


@bench_app.command("admission")
def admission_command(
    jobs: int = typer.Option(300, "--jobs", min=1, help="Jobs to admit (the trace's prompts)."),
    processes: int = typer.Option(1, "--processes", min=1, help="Admit processes (forked)."),
    threads: int = typer.Option(
        1, "--threads", min=1, max=15, help="Admitting threads per process, as REPRISE_ADMIT_THREADS."
    ),
    batch_max: int | None = typer.Option(
        None, "--batch-max", min=1, help="Prompts per embedding call with threads (REPRISE_EMBED_BATCH_MAX)."
    ),
    batch_wait_ms: float | None = typer.Option(
        None,
        "--batch-wait-ms",
        min=0.0,
        help="A batch's wait for more prompts (REPRISE_EMBED_BATCH_WAIT_MS).",
    ),
    cached: int = typer.Option(500, "--cached", min=1, help="Prompts cached first (embedded, keyed)."),
    repeats: float = typer.Option(
        0.2, "--repeats", min=0.0, max=1.0, help="Share of jobs repeating a cached prompt."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the report to this JSON file."),
) -> None:
    """Admissions per second per admit process and each stage's p50/p99, on the configured database."""
    from bench.cache.admission import AdmissionBenchOptions, run_admission_bench

    options = AdmissionBenchOptions(
        jobs=jobs,
        processes=processes,
        threads=threads,
        batch_max=batch_max,
        batch_wait_ms=batch_wait_ms,
        cached=cached,
        repeats=repeats,
        seed=seed,
    )
    text = json.dumps(run_admission_bench(get_settings(), options), indent=2)
    if json_path is not None:
        json_path.write_text(text + "\n")
    typer.echo(text)
