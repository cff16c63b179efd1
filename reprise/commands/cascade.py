"""`reprise cascade ...`: DiffServe's discriminator (train it, store it) and the allocator's decisions."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from core.settings import get_settings

cascade_app = typer.Typer(
    help="DiffServe's cascade: its discriminator and its allocator.", no_args_is_help=True
)


@cascade_app.callback()
def _group() -> None:
    """DiffServe's cascade: its discriminator and its allocator."""


@cascade_app.command("train")
def train_command(
    prompts: int = typer.Option(600, "--prompts", min=4, help="Prompts: half train, half are held out."),
    seed: int = typer.Option(14_000, "--seed", help="Seed of the lab's scenes."),
    guidance: float = typer.Option(7.5, "--guidance", help="Classifier-free guidance of every generation."),
    pairs: Path | None = typer.Option(
        None, "--pairs", help="Real models: JSON lines {prompt, image} of real images (MS-COCO-like)."
    ),
    save: bool = typer.Option(True, "--save/--no-save", help="Store it in Postgres for the light workers."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report (and f(t)) as JSON here."),
) -> None:
    """Train the discriminator on the configured light (small, at REPRISE_CASCADE_LIGHT_STEPS) and heavy
    (large) models, report its accuracy and the cascade at every threshold, and store it (versioned)."""
    from bench.quality.cascade import CascadeOptions, train_cascade
    from core.errors import RepriseError

    settings = get_settings()
    options = CascadeOptions(
        light=settings.model_source("small"),
        heavy=settings.model_source("large"),
        prompts=prompts,
        seed=seed,
        steps=settings.steps,
        light_steps=settings.cascade_light_steps,
        guidance=guidance,
        pairs=pairs,
    )
    try:
        discriminator, report = train_cascade(settings, options, log=lambda line: typer.echo(line, err=True))
    except (ValueError, RepriseError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    if save:
        from db import cascade as cascade_db
        from db.engine import session_scope

        with session_scope(settings) as session:
            report["version"] = cascade_db.save_discriminator(
                session,
                light_model=options.light,
                heavy_model=options.heavy,
                features=report["features"],
                accuracy=report["accuracy"],
                report=report,
                model=discriminator.to_bytes(),
            )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2) + "\n")
    _print(report)


def _print(report: dict[str, object]) -> None:
    light, heavy = report["light_only"], report["heavy_only"]
    assert isinstance(light, dict) and isinstance(heavy, dict)
    typer.echo(
        f"discriminator ({report['features']} features) accuracy {report['accuracy']:.4f} on "
        f"{report['held_out']} held-out prompts; routing AUC {report['routing_auc']}; the heavy model "
        f"beats {report['heavy_improves']:.0%} of the light images"
        + (f"; stored as version {report['version']}" if "version" in report else "")
    )
    typer.echo(f"{'':22} {'quality':>8} {'escalated':>9} {'images/s':>9}")
    typer.echo(f"{'light only':22} {light['quality']:8.4f} {0.0:9.2f} {light['throughput_per_s']:9.3f}")
    typer.echo(f"{'heavy only':22} {heavy['quality']:8.4f} {1.0:9.2f} {heavy['throughput_per_s']:9.3f}")
    rows = report["cascade"]
    assert isinstance(rows, list)
    for row in rows:
        label = f"cascade t={row['threshold']:.4g}"
        typer.echo(
            f"{label:22} {row['quality']:8.4f} {row['escalation_rate']:9.2f} {row['throughput_per_s']:9.3f}"
            f"   (random routing {row['random_quality']:.4f})"
        )


@cascade_app.command("status")
def status_command(last: int = typer.Option(5, "--last", min=1, help="Decisions to show.")) -> None:
    """The stored discriminator of the light model and the allocator's latest decisions."""
    from db import cascade as cascade_db
    from db.engine import session_scope
    from jobs.policies.cascade import feature_kind_for

    settings = get_settings()
    light = settings.model_source("small")
    with session_scope(settings) as session:
        kind = feature_kind_for(light).value
        stored = cascade_db.discriminator_summary(session, light_model=light, features=kind)
        decisions = cascade_db.recent_decisions(session, last)
        threshold, source = cascade_db.current_threshold(session, default=settings.cascade_threshold)
    typer.echo(f"allocator: {settings.allocator.value}; threshold now {threshold:.4g} ({source})")
    if stored is None:
        typer.echo(f"no discriminator for {light}: run `reprise cascade train`")
    else:
        typer.echo(f"discriminator v{stored['version']} for {light}: accuracy {stored['accuracy']:.4f}")
    for d in decisions:
        why = d.solution.get("cold_start") or d.solution.get("fallback")
        escalated = d.solution.get("escalated")
        typer.echo(
            f"{d.decided_at.isoformat(timespec='seconds')} threshold {d.threshold:.4g} "
            + (f"(f {escalated:.2f}) " if escalated is not None else "")
            + f"heavy {d.target_heavy} light {d.target_light} (applied {d.applied_heavy}/{d.applied_light}) "
            f"feasible {d.feasible} {d.solve_ms:.1f} ms" + (f": {why}" if why else "")
        )
