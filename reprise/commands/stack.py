"""The processes of the stack: `reprise api|worker|beat|flower`, and `reprise run` for all of them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from core.settings import Settings, get_settings
from core.vocabulary import Role

if TYPE_CHECKING:
    from fastapi import FastAPI


def api_command(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    workers: int = typer.Option(1, help="uvicorn worker processes."),
) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs); /metrics on REPRISE_METRICS_PORT when set."""
    import uvicorn

    from core.logs import configure_logging

    settings = get_settings()
    configure_logging(settings.log_format)
    if workers > 1:  # one metrics view over every process: prometheus_client's multiprocess mode
        use_multiprocess_dir(settings, "api")
    if settings.metrics_port is not None:
        from api.metrics_server import start_metrics_server

        start_metrics_server(settings, port=settings.metrics_port, address=settings.metrics_address)
    uvicorn.run(
        "reprise.commands.stack:serving_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        log_config=None,  # core.logs configured the root logger (serving_app again in each worker)
        access_log=False,  # a line per request costs intake time; /metrics counts every request
    )


def serving_app() -> FastAPI:
    """The API wired to this deployment's decode nodes."""
    from api.main import create_app
    from api.reads import NodeReader
    from core.logs import configure_logging
    from db.blobs.factory import blob_store_from_settings
    from jobs.dispatch import CeleryDispatcher

    settings = get_settings()
    configure_logging(settings.log_format)  # again: uvicorn's worker processes start afresh
    blobs = blob_store_from_settings(settings)
    dispatcher = CeleryDispatcher.for_settings(settings)
    reader = NodeReader(settings, dispatcher)
    return create_app(settings, dispatcher=dispatcher, blob_store=blobs, reader=reader)


def worker_command(
    role: Role = typer.Option(..., help="admit, large, small, decode or io."),
    name: str | None = typer.Option(None, help="Worker node name (default: <role>-<pid>@<host>)."),
    concurrency: int = typer.Option(1, help="Processes; GPU roles use one process per GPU."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Serve the worker's metrics here (default: REPRISE_WORKER_METRICS_PORT)."
    ),
    queues: str | None = typer.Option(
        None,
        help="Consume only these of the role's queues (comma list), e.g. `--role io --queues webhooks` and "
        "`--role io --queues maintenance`: two consumers, so the passes never wait behind deliveries.",
    ),
) -> None:
    """Run a Celery worker that hosts one role and consumes that role's queues."""
    from core.errors import SettingsError

    settings = get_settings()
    use_multiprocess_dir(settings, "worker")  # before anything imports prometheus_client
    from workers.bootstrap import run_worker

    port = metrics_port or settings.worker_metrics_port
    try:
        only = tuple(part.strip() for part in queues.split(",") if part.strip()) if queues else None
        run_worker(role, name=name, concurrency=concurrency, metrics_port=port, only_queues=only)
    except SettingsError as refused:  # e.g. a local blob store while workers run on another host
        typer.echo(f"refusing to start: {refused}", err=True)
        raise typer.Exit(2) from None


def use_multiprocess_dir(settings: Settings, kind: str) -> None:
    """Give this process and the ones it forks or spawns a fresh prometheus_client multiprocess directory
    (<data_dir>/prometheus/<kind>-<pid>), so that one scrape sums them all; directories of processes that
    are gone are removed. Must run before prometheus_client is imported (it reads the variable then)."""
    import os
    import shutil
    import sys

    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before its multiprocess directory was set")
    root = settings.data_dir.resolve() / "prometheus"
    for stale in root.glob("*-*"):
        pid = stale.name.rpartition("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    shared = root / f"{kind}-{os.getpid()}"
    shutil.rmtree(shared, ignore_errors=True)
    shared.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(shared)


def beat_command() -> None:
    """Run the one periodic scheduler (eviction, predictor retraining, reconciling)."""
    from jobs.celery_app import get_celery_app

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    schedule = settings.data_dir / "celerybeat-schedule"
    get_celery_app().start(["beat", "--loglevel=INFO", f"--schedule={schedule}"])


LOOPBACK = ("127.0.0.1", "localhost", "::1")


# Tasks Flower keeps in memory. Flower's default, 100,000, let it grow by 1 MiB a minute through a
# 30-minute soak (+22% after its first five minutes, docs/results/soak.md): about 6 KiB a task, the
# soak's 1,780 jobs being some 5,000 tasks. 2,000 tasks bound that at about 12 MiB (a tenth of Flower's
# own 107 MiB), the last quarter of an hour at the soak's rate; Prometheus keeps the history.
FLOWER_MAX_TASKS = 2_000


def flower_command(
    port: int = typer.Option(5555, help="Port of the Flower UI."),
    address: str | None = typer.Option(None, help="Address to bind (default: REPRISE_FLOWER_ADDRESS)."),
) -> None:
    """Run Flower, the Celery monitor: every queue, task and worker. Off loopback it needs basic auth."""
    from jobs.celery_app import get_celery_app

    settings = get_settings()
    bind = address or settings.flower_address
    argv = ["flower", f"--port={port}", f"--address={bind}", f"--max_tasks={FLOWER_MAX_TASKS}"]
    if settings.flower_basic_auth is not None:
        credentials = settings.flower_basic_auth.get_secret_value()
        if ":" not in credentials:
            raise typer.BadParameter("REPRISE_FLOWER_BASIC_AUTH must be user:password")
        argv.append(f"--basic-auth={credentials}")
    elif bind not in LOOPBACK:
        raise typer.BadParameter(
            f"Flower would listen on {bind} without authentication. Fix: set REPRISE_FLOWER_BASIC_AUTH="
            "user:password, or bind 127.0.0.1 and reach it through a tunnel",
            param_hint="--address",
        )
    get_celery_app().start(argv)


def ping_worker_command(
    name: str | None = typer.Option(None, help="The worker's node name (default: this host's worker)."),
    host: str | None = typer.Option(
        None, help="Ping the workers of this host (default: REPRISE_HOSTNAME, else this machine's hostname)."
    ),
    timeout_s: float = typer.Option(5.0, "--timeout", help="Seconds to wait for the answer."),
) -> None:
    """Exit 0 when the worker answers a Celery ping over the broker (a container's healthcheck). Only that
    worker is asked (a pod's worker is the only one on its host), and its answer ends the wait."""
    from jobs.celery_app import get_celery_app

    target = host or get_settings().worker_host
    ok, names = ping_workers(get_celery_app().control, name=name, host=target, timeout_s=timeout_s)
    typer.echo(f"{'ok' if ok else 'no answer'}: {names}")
    raise typer.Exit(0 if ok else 1)


def ping_workers(control: Any, *, name: str | None, host: str, timeout_s: float) -> tuple[bool, list[str]]:
    """Ping the worker named `name`, else the workers whose node name ends with @`host`: the broadcast
    carries the destination (or a glob pattern), so no other worker answers, and it returns at the first
    answer (kombu waits for len(destination) replies, or `limit`) instead of waiting out the timeout.
    Returns whether the worker answered, and the nodes that did."""
    if name:
        replies = control.ping(destination=[name], timeout=timeout_s)
    else:
        replies = control.ping(pattern=f"*@{host}", matcher="glob", limit=1, timeout=timeout_s)
    names = sorted({node for reply in replies or [] for node in reply})
    ok = name in names if name else any(node.endswith(f"@{host}") for node in names)
    return ok, names


def run_command(
    port: int = typer.Option(8000, help="API port."),
    flower_port: int = typer.Option(5555, help="Flower port."),
    demo: int = typer.Option(
        100, help="Prompts of the shared trace to replay once the stack is up (0: none)."
    ),
    workers_redis_url: str | None = typer.Option(
        None, "--workers-redis-url", help="The workers' Redis address, when theirs differs (a proxy)."
    ),
    workers_database_url: str | None = typer.Option(
        None, "--workers-database-url", help="The workers' Postgres address, when theirs differs (a pooler)."
    ),
) -> None:
    """Bring the whole stack up in the foreground: API, one worker per role, beat, Flower. Ctrl-C stops it."""
    from reprise.supervisor import run_stack

    worker_env = {
        key: value
        for key, value in (
            ("REPRISE_REDIS_URL", workers_redis_url),
            ("REPRISE_DATABASE_URL", workers_database_url),
        )
        if value is not None
    }
    settings = get_settings()
    code = run_stack(settings, port=port, flower_port=flower_port, demo_prompts=demo, worker_env=worker_env)
    raise typer.Exit(code)
