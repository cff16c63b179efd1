"""`reprise run`: start every process of the stack, keep them up (a worker not alive by its progress is
replaced too, workers.liveness), stop them all on Ctrl-C.

Each process logs to <data_dir>/logs/<name>.log; the terminal shows where things are, the demo
replay's progress and its summary, and every restart of a crashed process (reprise.supervision),
which <data_dir>/logs/supervisor.log keeps too.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import httpx

from core.redaction import redacted_url
from core.settings import Settings
from core.vocabulary import Role
from jobs.queues import Queue
from reprise.supervision import Child, Supervisor
from reprise.welcome import ensure_demo_key, welcome

if TYPE_CHECKING:
    from celery import Celery

STACK_ROLES = (Role.ADMIT, Role.LARGE, Role.SMALL, Role.DECODE, Role.IO)
START_RESTARTS = 3  # a child restarted this often before the stack is ready has a problem a restart won't fix


def _reprise(*args: str) -> list[str]:
    return [sys.executable, "-m", "reprise", *args]


def run_dir(settings: Settings) -> Path:
    """Where the supervisor keeps each running child's pid (<name>.pid)."""
    return settings.data_dir.resolve() / "run"


def stack_children(
    settings: Settings, *, port: int, flower_port: int, worker_env: dict[str, str] | None = None
) -> list[Child]:
    """The stack's processes; the workers' environment has `worker_env` on top of this process's (the
    services reached through another address, such as a pooler or a fault proxy)."""
    logs = settings.data_dir.resolve() / "logs"
    argvs = {"api": _reprise("api", "--port", str(port))}
    for role in STACK_ROLES:
        argvs[f"worker-{role.value}"] = _reprise("worker", "--role", role.value)
    # The io role as two consumers: deliveries (threads, bounded per endpoint) and the maintenance
    # passes, so that reconcile, eviction and purge never wait behind a slow webhook endpoint.
    argvs["worker-io"] += ["--queues", Queue.WEBHOOKS.value]
    argvs["worker-maintenance"] = _reprise(
        "worker", "--role", Role.IO.value, "--queues", Queue.MAINTENANCE.value
    )
    for index in range(1, settings.read_nodes):  # more decode nodes (LatentBox's testbed has three)
        argvs[f"worker-decode-{index}"] = _reprise(
            "worker", "--role", "decode", "--name", f"decode-{index}@%h"
        )
    if settings.worker_metrics_port is not None:  # each worker its own listener: the port, the next ones
        workers = [name for name in argvs if name.startswith("worker-")]
        for offset, name in enumerate(workers):
            argvs[name] += ["--metrics-port", str(settings.worker_metrics_port + offset)]
    argvs["beat"] = _reprise("beat")
    argvs["flower"] = _reprise("flower", "--port", str(flower_port))
    pids = run_dir(settings)
    env = {**os.environ, **worker_env} if worker_env else None
    return [
        Child(
            name,
            argv,
            logs / f"{name}.log",
            pids / f"{name}.pid",
            env=env if name.startswith("worker-") else None,
            health=worker_health(settings) if name.startswith("worker-") else None,
        )
        for name, argv in argvs.items()
    ]


def worker_health(settings: Settings) -> Callable[[int], str | None]:
    """Why the worker of a pid is not alive by its own last report (workers.liveness: a hung model call,
    a consumer that stopped, a frozen process), or None; None too before its first report."""
    from workers.liveness import read_verdicts, report_dir

    directory = report_dir(settings)

    def unwell(pid: int) -> str | None:
        reports = read_verdicts(directory, now=time.time(), period_s=settings.liveness_period_s, pid=pid)
        return next((report.reason for report in reports if not report.alive), None)

    return unwell


def _reporter(logs: Path) -> logging.Logger:
    """The supervisor's own log: every exit and restart, with the time."""
    logger = logging.getLogger("reprise.supervisor")
    logs.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(logs / "supervisor.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def wait_ready(base_url: str, children: list[Child], timeout_s: float = 180.0) -> None:
    """Wait for /readyz and for a worker of every role to answer a ping (the supervisor restarts what
    crashes meanwhile); give up on a child that keeps crashing: it will not come up by itself."""
    from jobs.celery_app import get_celery_app

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        looping = [child.name for child in children if child.restarts >= START_RESTARTS]
        if looping:
            raise RuntimeError(
                f"{', '.join(looping)} kept exiting during start-up; see {children[0].log_path.parent}"
            )
        try:
            ready = httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            ready = False
        if ready and every_role_answers(get_celery_app()):
            return
        time.sleep(1.0)
    raise RuntimeError(f"the stack was not ready after {timeout_s:.0f}s; see {children[0].log_path.parent}")


def every_role_answers(app: Celery) -> bool:
    """A worker of every role answers a ping (none while the broker cannot be reached)."""
    from jobs.hosts import answering_roles

    return {role.value for role in STACK_ROLES} <= answering_roles(app)


def _print_addresses(settings: Settings, base_url: str, flower_port: int) -> None:
    metrics = (
        f"http://{settings.metrics_address}:{settings.metrics_port}/metrics"
        if settings.metrics_port is not None
        else f"{base_url}/metrics"
    )
    print(f"API        {base_url}  (docs: {base_url}/docs, metrics: {metrics})")
    if settings.worker_metrics_port is not None:
        print(f"Workers    metrics on ports {settings.worker_metrics_port} and up (one per worker)")
    print(f"Flower     http://127.0.0.1:{flower_port}")
    print(f"Postgres   {redacted_url(settings.sqlalchemy_url)}")
    print(f"Redis      {redacted_url(settings.broker_url)}")


def run_stack(
    settings: Settings,
    *,
    port: int,
    flower_port: int,
    demo_prompts: int,
    worker_env: dict[str, str] | None = None,
) -> int:
    children = stack_children(settings, port=port, flower_port=flower_port, worker_env=worker_env)
    stopping = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    base_url = f"http://127.0.0.1:{port}"
    logger = _reporter(children[0].log_path.parent)

    def say(message: str) -> None:
        logger.warning(message)
        print(message, file=sys.stderr, flush=True)

    supervisor = Supervisor(children, say=say)
    try:
        supervisor.start()
        print(f"starting {len(children)} processes; logs in {children[0].log_path.parent}", flush=True)
        logger.info("started %s", ", ".join(f"{child.name} (pid {child.pid()})" for child in children))
        wait_ready(base_url, children)
        _print_addresses(settings, base_url, flower_port)
        key = ensure_demo_key(settings)
        if demo_prompts > 0:
            print(f"API key    {key.api_key}  (stored in {key.path})", flush=True)
            from bench.live.demo import run_demo

            run_demo(
                settings,
                base_url=base_url,
                api_key=key.api_key,
                prompts=demo_prompts,
                should_stop=stopping.is_set,
            )
        print(welcome(base_url, key), flush=True)  # below the demo's summary, where one looks
        print("the stack is up; a process that exits is restarted; Ctrl-C stops it", flush=True)
        stopping.wait()
        return 0
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        print("stopping...", flush=True)
        supervisor.stop()
