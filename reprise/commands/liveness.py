"""`reprise worker-alive`: the workers' liveness probe (compose's healthcheck, Kubernetes' livenessProbe).

It reads the verdicts this machine's workers wrote on themselves (workers.liveness): alive when they took
or finished work recently or have none to take, not alive when a model call hung, when the consumer
stopped while its queues hold work, or when the process is frozen (its report stale). It asks neither
the broker nor the database, so that their outage restarts no worker; readiness stays `reprise
ping-worker`, which asks only this host's worker.
"""

from __future__ import annotations

import time

import typer

from core.settings import get_settings


def worker_alive_command(
    pid: int | None = typer.Option(None, help="The worker's main process (default: every worker here)."),
) -> None:
    """Exit 0 when this machine's worker is alive by its progress, 1 with the reason when it is not."""
    from workers.liveness import read_verdicts, report_dir

    settings = get_settings()
    directory = report_dir(settings)
    reports = read_verdicts(directory, now=time.time(), period_s=settings.liveness_period_s, pid=pid)
    if not reports:
        typer.echo(
            f"no worker has reported in {directory}: start one (`reprise worker --role ...`) and wait "
            f"{settings.liveness_period_s:.0f}s after its consumer is ready, or pass the REPRISE_DATA_DIR "
            "it runs with",
            err=True,
        )
        raise typer.Exit(1)
    for report in reports:
        typer.echo(
            f"{report.worker} (pid {report.pid}): {'alive' if report.alive else 'NOT alive'}, {report.reason}"
        )
    raise typer.Exit(0 if all(report.alive for report in reports) else 1)
