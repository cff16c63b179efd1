"""`reprise bench soak`: a moderate mixed load kept on a stack for minutes (bench.soak): per-process memory,
stuck jobs, p99 per minute and errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from core.settings import get_settings
from reprise.commands.bench import JsonOpt, bench_app


@bench_app.command("soak")
def soak_command(
    minutes: float = typer.Option(30.0, "--minutes", min=0.05, help="How long the load lasts."),
    seconds: float | None = typer.Option(
        None, "--seconds", min=1.0, help="The same in seconds (short runs, tests); overrides --minutes."
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="A running stack (same settings as this process). Unset: start one."
    ),
    rate: float = typer.Option(2.0, "--rate", min=0.1, help="Requests per second."),
    max_inflight: int = typer.Option(
        6, "--max-inflight", min=1, help="Generations in flight at most (a submission past it reads)."
    ),
    video: bool = typer.Option(True, "--video/--no-video", help="Send a few short video jobs."),
    drain_s: float = typer.Option(
        300.0, "--drain-s", min=0.0, help="After the load, seconds a job may take to end before it is stuck."
    ),
    sample_every_s: float = typer.Option(10.0, "--sample-every-s", min=0.5, help="RSS sampling period."),
    samples_path: Path | None = typer.Option(
        None, "--samples", help="Write the RSS samples, growth after 5 minutes and error kinds here."
    ),
    workdir: Path | None = typer.Option(
        None, help="Where the bench's own stack lives (default: a temp dir)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the request mix."),
    json_path: JsonOpt = None,
) -> None:
    """Keep images (cache on and off), a few videos, reads and cancels on the stack; report
    {minutes, requests, errors, stuck, p99_ms_by_minute, rss_mb: {process: {start, end, max}}}."""
    from bench.chaos.runner import isolated_stack, target_for
    from bench.run.options import guarded
    from bench.soak.runner import SoakOptions, run_soak

    def main() -> int:
        options = SoakOptions(
            seconds=seconds if seconds is not None else minutes * 60,
            rate=rate,
            max_inflight=max_inflight,
            video=video,
            drain_s=drain_s,
            sample_every_s=sample_every_s,
            seed=seed,
        )
        try:
            if base_url is not None:
                report = run_soak(target_for(base_url, get_settings()), options, samples_path=samples_path)
            else:
                with isolated_stack(workdir) as target:
                    report = run_soak(target, options, samples_path=samples_path)
        except RuntimeError as error:  # the stack cannot be driven: say why, no traceback
            print(f"error: {error}", file=sys.stderr)
            return 2
        text = json.dumps(report, indent=2)
        if json_path is not None:
            json_path.write_text(text + "\n")
        print(text)
        return 1 if report["stuck"] else 0

    raise typer.Exit(guarded(main))
