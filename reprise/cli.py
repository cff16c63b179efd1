"""The `reprise` command line. Each group lives in reprise/commands/; this module only gathers them."""

from __future__ import annotations

import os

import typer

from core.errors import SettingsError
from core.settings import get_settings
from jobs.configuration import check_configuration
from reprise.commands import (  # noqa: F401  (register `bench admission|cache|gpu|replay|soak|step-cache`)
    bench_admission,
    bench_cache,
    bench_gpu,
    bench_replay,
    bench_soak,
    bench_step_cache,
)
from reprise.commands.bench import bench_app
from reprise.commands.cascade import cascade_app
from reprise.commands.config import config_app
from reprise.commands.keys import keys_app
from reprise.commands.lab import lab_app, profile_app
from reprise.commands.liveness import worker_alive_command
from reprise.commands.models import models_app
from reprise.commands.pools import pools_app
from reprise.commands.services import migrate_command, services_app
from reprise.commands.stack import (
    api_command,
    beat_command,
    flower_command,
    ping_worker_command,
    run_command,
    worker_command,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights come from configured paths, never a download here

app = typer.Typer(
    help="Reprise: text-to-image serving with an approximate cache of earlier work.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


SERVING_COMMANDS = frozenset({"api", "worker", "run"})


@app.callback()
def _check_settings(context: typer.Context) -> None:
    """Fail at start, naming the variable and the fix, when settings or their combination are invalid;
    the commands that serve also print the configuration's warnings."""
    try:
        warnings = check_configuration(get_settings())
    except SettingsError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(2) from None
    if context.invoked_subcommand in SERVING_COMMANDS:
        for warning in warnings:
            typer.echo(f"warning: {warning}", err=True)


app.add_typer(services_app, name="services")
app.command("migrate")(migrate_command)
app.add_typer(bench_app, name="bench")
app.add_typer(keys_app, name="keys")
app.add_typer(models_app, name="models")
app.add_typer(lab_app, name="lab")
app.add_typer(profile_app, name="profile")
app.add_typer(pools_app, name="pools")
app.add_typer(cascade_app, name="cascade")
app.add_typer(config_app, name="config")
app.command("api")(api_command)
app.command("worker")(worker_command)
app.command("beat")(beat_command)
app.command("flower")(flower_command)
app.command("ping-worker")(ping_worker_command)
app.command("worker-alive")(worker_alive_command)
app.command("run")(run_command)


def schema_missing(error: Exception) -> str | None:
    """The message with the fix when `error` is Postgres saying a table does not exist (SQLSTATE 42P01):
    the database the command reached was never migrated. None for any other error."""
    orig = getattr(error, "orig", None)
    if getattr(orig, "sqlstate", None) != "42P01":
        return None
    first = str(orig).splitlines()[0] if str(orig) else "a table is missing"
    return (
        f"the database has no Reprise schema ({first}): run `reprise migrate` with the same "
        "REPRISE_DATABASE_URL, or point REPRISE_DATABASE_URL at the stack's database"
    )


def main() -> None:
    """The `reprise` command: the app, with an unmigrated database reported as a message with the fix
    rather than a traceback."""
    from sqlalchemy.exc import ProgrammingError

    try:
        app()
    except ProgrammingError as error:
        message = schema_missing(error)
        if message is None:
            raise
        typer.echo(message, err=True)
        raise SystemExit(2) from None
