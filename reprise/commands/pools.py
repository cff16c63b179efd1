"""`reprise pools ...`: the GPU pools, the monitor's last decision, and the operator's pins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from core.settings import get_settings
from core.vocabulary import Role

if TYPE_CHECKING:
    from jobs.pools.actuator import PoolActuator

pools_app = typer.Typer(help="GPU pools: status, and pinning workers to a pool.", no_args_is_help=True)


@pools_app.callback()
def _group() -> None:
    """GPU pools: status, and pinning workers to a pool."""  # keeps `pools status` a subcommand


def _actuator() -> PoolActuator:
    from jobs.celery_app import get_celery_app
    from jobs.pools.actuator import PoolActuator

    return PoolActuator(get_celery_app())


@pools_app.command("status")
def status_command() -> None:
    """Every worker (alive or recorded), its role and pin, and the monitor's latest decision."""
    from db import pools
    from db.engine import session_scope

    live = _actuator().roles()
    with session_scope(get_settings()) as session:
        rows = {row.worker_name: row for row in pools.recorded_workers(session)}
        latest = pools.latest_decision(session)
    typer.echo(f"{'worker':40} {'role':8} {'pinned':7} {'alive':6} since")
    for name in sorted(set(rows) | set(live)):
        row = rows.get(name)
        role = live.get(name) or (row.role if row is not None else None)
        since = row.since.isoformat(timespec="seconds") if row is not None else "-"
        pinned = "yes" if row is not None and row.pinned else "no"
        alive = "yes" if name in live else "no"
        typer.echo(f"{name:40} {role.value if role else '-':8} {pinned:7} {alive:6} {since}")
    if latest is None:
        typer.echo("\nno pool decision yet")
        return
    heuristic = "-" if latest.heuristic_large is None else f"{latest.heuristic_large:.2f}"
    typer.echo(
        f"\nlatest decision ({latest.mode}, {latest.decided_at.isoformat(timespec='seconds')}): "
        f"target {latest.target_large} large / {latest.target_small} small, applied "
        f"{latest.applied_large} / {latest.applied_small}; Algorithm 1 target {heuristic}, "
        f"PID {latest.controlled_large:.2f}; R {latest.inputs.get('request_rate', 0):.3f}/s, "
        f"hit rate {latest.inputs.get('hit_rate')}"
    )


@pools_app.command("pin")
def pin_command(
    worker: str = typer.Argument(..., help="Worker node name, e.g. large-1@gpu-host (see `pools status`)."),
    role: Role = typer.Argument(..., help="large or small."),
) -> None:
    """Pin a worker to a pool: it moves there now if it runs elsewhere, and the monitor leaves it."""
    from jobs.pools.pins import pin_worker

    try:
        outcome = pin_worker(get_settings(), _actuator(), worker=worker, role=role)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    if not outcome.alive:
        typer.echo(f"pinned {worker} to {role.value}; it is not running: it starts as {role.value}")
    elif outcome.moved:
        typer.echo(f"pinned {worker} to {role.value}; moved: its next task runs on the {role.value} model")
    else:
        typer.echo(f"pinned {worker} to {role.value}")


@pools_app.command("unpin")
def unpin_command(worker: str = typer.Argument(..., help="Worker node name.")) -> None:
    """Let the monitor move a pinned worker again."""
    from jobs.pools.pins import unpin_worker

    if not unpin_worker(get_settings(), worker=worker):
        typer.echo(f"no worker {worker} is recorded", err=True)
        raise typer.Exit(1)
    typer.echo(f"unpinned {worker}: the pool monitor may move it")
