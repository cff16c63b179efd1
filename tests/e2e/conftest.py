"""A whole stack for end-to-end tests: the API under uvicorn and one Celery worker per role, as
subprocesses on the real Postgres and Redis, with the quality lab's models, plus a local webhook receiver.

The stack runs a short schedule (T = 10, states at 2, 4, 6, 8) at 64x64 so that a generation takes
about a second on two cores; hits run only on the small pool so the route is observable.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import Settings
from core.vocabulary import Role
from db.engine import session_scope
from db.tenants import TenantCredentials, issue_key
from lab.models import ensure_lab_models
from tests.conftest import fresh_database

STACK_ROLES = (Role.ADMIT, Role.LARGE, Role.SMALL, Role.DECODE, Role.IO)
START_TIMEOUT_S = 240.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    """Records every POST; answers with the queued status codes, then 200."""

    url: str
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, job_id: str, event: str, timeout_s: float = 60.0) -> Received:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                for item in self.received:
                    payload = item.json()
                    if payload["type"] == event and payload["data"]["id"] == job_id:
                        return item
            time.sleep(0.1)
        raise AssertionError(f"no {event} webhook for job {job_id} within {timeout_s}s")


@pytest.fixture(scope="session")
def webhook_receiver() -> Iterator[WebhookReceiver]:
    port = free_port()
    receiver = WebhookReceiver(url=f"http://127.0.0.1:{port}/hook")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with receiver.lock:
                receiver.received.append(Received(dict(self.headers.items()), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    server.shutdown()


@dataclass
class Stack:
    settings: Settings
    base_url: str
    env: dict[str, str]
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)  # worker role -> its metrics listener

    def start(self, name: str, argv: list[str]) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "reprise", *argv],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_worker(self, role: Role) -> None:
        port = self.metrics_ports.setdefault(role.value, free_port())
        argv = ["worker", "--role", role.value, "--name", f"{role.value}-e2e@%h", "--metrics-port", str(port)]
        self.start(f"worker-{role.value}", argv)

    def kill(self, name: str) -> None:
        """SIGKILL the process group: the worker and its pool child die without a word."""
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        stop_processes(self.processes.values())

    def wait_workers(self, roles: tuple[Role, ...]) -> None:
        from celery import Celery

        app = Celery(broker=self.settings.broker_url)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            replies = app.control.ping(timeout=1.0) or []
            names = {name for reply in replies for name in reply}
            if all(any(name.startswith(f"{role.value}-e2e@") for name in names) for role in roles):
                return
            self._check_alive()
            time.sleep(1.0)
        raise AssertionError(f"workers {roles} did not answer within {START_TIMEOUT_S}s; logs in {self.logs}")

    def wait_api(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            self._check_alive()
            time.sleep(0.5)
        raise AssertionError(f"the API was not ready within {START_TIMEOUT_S}s; logs in {self.logs}")

    @contextmanager
    def serving(self, port: int, roles: tuple[Role, ...]) -> Iterator[None]:
        """The API on `port` and one worker per role, ready; everything stopped on exit."""
        try:
            self.start("api", ["api", "--port", str(port)])
            for role in roles:
                self.start_worker(role)
            self.wait_api()
            self.wait_workers(roles)
            yield
        finally:
            self.stop()

    def _check_alive(self) -> None:
        dead = [name for name, process in self.processes.items() if process.poll() is not None]
        if dead:
            raise AssertionError(f"{dead} exited; logs in {self.logs}")


@pytest.fixture(scope="session")
def stack_db_settings(service_settings: Settings) -> Iterator[Settings]:
    """The session stack's own database: the other integration tests leave jobs in theirs that no
    worker ran, and a reconcile pass called by a test here would send them all to this stack."""
    with fresh_database(service_settings) as settings:
        yield settings


@pytest.fixture(scope="session")
def stack(
    stack_db_settings: Settings,
    stack_redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    webhook_receiver: WebhookReceiver,
) -> Iterator[Stack]:
    ensure_lab_models(stack_db_settings)  # the default models: the quality lab's
    overrides = {
        "REPRISE_DATABASE_URL": stack_db_settings.sqlalchemy_url,
        "REPRISE_REDIS_URL": stack_redis_url,
        "REPRISE_DATA_DIR": str(stack_db_settings.data_dir.resolve()),  # where the lab pipelines are
        "REPRISE_BLOB_DIR": str(tmp_path_factory.mktemp("blobs")),
        "REPRISE_STEPS": "10",
        "REPRISE_CAPTURE_STEPS": "2,4,6,8",
        "REPRISE_DEFAULT_SIZE": "64",
        "REPRISE_LARGE_SERVES_HITS": "false",
        # One model a worker: these tests place a job on its pool (a miss on the large worker, a hit on
        # the small one). Co-hosting, the default, runs on the pool monitor's stack (test_pool_monitor).
        "REPRISE_COHOST": "false",
        "REPRISE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
        "REPRISE_WEBHOOK_RETRY_DELAYS_S": "0,1,1",
        # Short leases, and a visibility timeout far beyond any test: a dead run must come back
        # through its lapsed lease and the reconciler, not through Redis redelivery.
        "REPRISE_LEASE_S": "6",
        "REPRISE_LEASE_RENEW_S": "2",
        "REPRISE_TASK_TIME_LIMIT_S": "120",
        "REPRISE_VISIBILITY_TIMEOUT_S": "900",
        "REPRISE_PREDICTOR_ENABLED": "false",
        "REPRISE_LOOKUP_MODE": stack_db_settings.lookup_mode.value,  # text lookups, as tests/conftest.py
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",  # five processes share two cores
        "REPRISE_LOG_FORMAT": "json",  # what a deployment writes: tests read the job's lines
    }
    env = {**os.environ, **overrides}
    settings = stack_db_settings.model_copy(
        update={
            "redis_url": stack_redis_url,
            "steps": 10,
            "capture_steps": [2, 4, 6, 8],
            "default_size": 64,
            "lease_s": 6.0,
            "lease_renew_s": 2.0,
            "cohost": False,
        }
    )
    port = free_port()
    logs = tmp_path_factory.mktemp("logs")
    running = Stack(settings=settings, base_url=f"http://127.0.0.1:{port}", env=env, logs=logs)
    with running.serving(port, STACK_ROLES):
        yield running


def make_tenant(
    settings: Settings, name: str, *, shared_cache: bool = False, admin: bool = False
) -> TenantCredentials:
    with session_scope(settings) as session:
        return issue_key(session=session, name=name, shared_cache=shared_cache, admin=admin)


def stop_processes(processes: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process group, then SIGKILL those still up after 20 s."""
    running = list(processes)
    for process in running:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in running:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
