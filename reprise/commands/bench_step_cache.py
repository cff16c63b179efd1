"""`reprise bench step-cache`, registered on the bench command group: each step cache setting's speed
against the judge's drop on the lab's models (bench.quality.step_cache), and TeaCache's fit."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from core.settings import get_settings
from reprise.commands.bench import bench_app

DEFAULT_SETTINGS = "deepcache:2,deepcache:3,deepcache:5,teacache:0.1,teacache:0.2,teacache:0.4"


@bench_app.command("step-cache")
def step_cache_command(
    settings_list: str = typer.Option(
        DEFAULT_SETTINGS, "--settings", help="REPRISE_STEP_CACHE values to sweep (off is always run)."
    ),
    models: str = typer.Option("lab:large,lab:small", "--models", help="The lab models to sweep."),
    prompts: int = typer.Option(500, "--prompts", min=2, help="Lab prompts per setting and model."),
    seed: int = typer.Option(1, "--seed", help="Seed of the prompts."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the sweep to this JSON file."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Models swept in parallel processes."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw the speed-quality curve to this PNG."),
    replot: Path | None = typer.Option(None, "--from", help="Instead: draw --plot from this sweep's JSON."),
    fit: str | None = typer.Option(
        None, "--fit", help="Instead: fit TeaCache's rescaling polynomial on this lab model (lab:large)."
    ),
    choose: Path | None = typer.Option(
        None,
        "--choose",
        help="Instead: record this sweep JSON's choice per model, what REPRISE_STEP_CACHE=auto runs.",
    ),
) -> None:
    """Sweep step cache settings on the lab (images/s against the judge's drop, per model) and name the
    default; or, with --fit, fit TeaCache's polynomial on a model; or, with --choose, record a sweep's
    choices for `auto`."""
    from bench.quality.plots import plot_step_cache
    from bench.quality.step_cache import fit_teacache, record_choices, sweep_models
    from core.step_cache import parse_step_cache

    if choose is not None:
        if not choose.is_file():
            typer.echo(f"error: no sweep JSON at {choose}: write one with --json", err=True)
            raise typer.Exit(2)
        recorded = record_choices(json.loads(choose.read_text()), source=choose.as_posix())
        chosen = ", ".join(f"{model}: {record['setting']}" for model, record in recorded.items())
        typer.echo(f"auto runs {chosen or 'off on every model'} (other models: off)")
        return
    if replot is not None:
        if plot is None:
            typer.echo("error: --from draws a plot: give --plot PATH", err=True)
            raise typer.Exit(2)
        typer.echo(f"wrote {plot_step_cache(json.loads(replot.read_text()), plot)}")
        return
    settings = get_settings()
    try:
        if fit is not None:
            record = fit_teacache(settings, fit, prompts=prompts, seed=seed)
            typer.echo(
                f"fitted {fit}: {record['pairs']} step pairs, rms residual {record['rms_residual']:.4f}"
            )
            return
        setups = [str(parse_step_cache(s)) for s in settings_list.split(",") if s.strip()]
        names = [m.strip() for m in models.split(",") if m.strip()]
        report = sweep_models(settings, setups, names, prompts=prompts, seed=seed, jobs=jobs, log=typer.echo)
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"default: {report['default']}")
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n")
        typer.echo(f"wrote {json_path}")
    if plot is not None:
        typer.echo(f"wrote {plot_step_cache(report, plot)}")
