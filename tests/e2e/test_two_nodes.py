"""Two worker nodes on one Postgres, one Redis and one S3 (moto's server): node A dies mid-run and
nothing is lost.

Each node is a set of worker processes with a host of its own (REPRISE_HOSTNAME: node-a, node-b; the
workers' names and the decode nodes' end in @node-a or @node-b), as two machines would run them. Jobs go
through the API; while node A's large worker holds some, every process of node A is SIGKILLed. The jobs
it held come back through their lapsed 6 s leases and the reconciler (node B's beat, called here every
second) and run on node B; every job succeeds once (one cache entry, one completed webhook), and every
image, whichever node stored its latent, is decoded on node B from S3. Last, a worker of a third host
that starts with a local blob store is refused: node B's workers answer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from celery import Celery
from sqlalchemy import func, select

from core.settings import Settings
from core.vocabulary import BlobBackend, Role
from db.blobs.s3 import S3BlobStore
from db.engine import session_scope
from db.models import CacheEntry, Job, WebhookDelivery
from db.tenants import TenantCredentials
from jobs.dispatch import CeleryDispatcher
from jobs.passes.reconcile import reconcile
from jobs.read_routing import live_nodes
from lab.models import ensure_lab_models
from tests.conftest import fresh_database
from tests.e2e.conftest import WebhookReceiver, free_port, make_tenant, stop_processes
from tests.support.redis_servers import scratch_redis

pytestmark = pytest.mark.integration

NODE_ROLES = {
    "node-a": (Role.ADMIT, Role.LARGE, Role.DECODE),
    "node-b": (Role.ADMIT, Role.LARGE, Role.DECODE, Role.IO),  # webhooks go out from B
}
JOBS = 12
START_TIMEOUT_S = 240.0
ENV = {
    # T = 30 at 64x64: two jobs run for a second or two, long enough to be killed mid-run
    "REPRISE_STEPS": "30",
    "REPRISE_CAPTURE_STEPS": "6,12,18,24",
    "REPRISE_DEFAULT_SIZE": "64",
    "REPRISE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
    "REPRISE_WEBHOOK_RETRY_DELAYS_S": "0,1,1",
    # A dead run comes back through its lapsed lease and the reconciler, not Redis' redelivery.
    "REPRISE_LEASE_S": "6",
    "REPRISE_LEASE_RENEW_S": "2",
    "REPRISE_STUCK_AFTER_S": "5",
    "REPRISE_TASK_TIME_LIMIT_S": "120",
    "REPRISE_VISIBILITY_TIMEOUT_S": "900",
    "REPRISE_PREDICTOR_ENABLED": "false",
    "REPRISE_LOOKUP_MODE": "text",  # NIRVANA's text lookups, as the session stack (tests/conftest.py)
    "REPRISE_MONITOR_ENABLED": "false",
    "REPRISE_MAX_BATCH": "2",  # a large worker holds two jobs at a time: each node runs several rounds
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
    "REPRISE_LOG_FORMAT": "json",
}


def worker_name(role: Role, host: str) -> str:
    return f"{role.value}-two@{host}"


@dataclass
class Nodes:
    """The API and each node's workers, as subprocesses; their logs under `logs`."""

    settings: Settings
    env: dict[str, str]
    logs: Path
    base_url: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def node_env(self, host: str, **extra: str) -> dict[str, str]:
        return {**self.env, "REPRISE_HOSTNAME": host, **extra}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "reprise", *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def start_node(self, host: str) -> None:
        for role in NODE_ROLES[host]:
            argv = ["worker", "--role", role.value, "--name", f"{role.value}-two@%h"]
            self.start(f"{host}-{role.value}", argv, self.node_env(host))

    def kill_node(self, host: str) -> None:
        """SIGKILL every process of the node: its workers and their pool children die without a word."""
        for role in NODE_ROLES[host]:
            process = self.processes.pop(f"{host}-{role.value}")
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def pid(self, host: str, role: Role) -> int:
        return self.processes[f"{host}-{role.value}"].pid

    def log(self, host: str, role: Role) -> str:
        return (self.logs / f"{host}-{role.value}.log").read_text(errors="replace")

    def wait_ready(self) -> None:
        app = Celery(broker=self.settings.broker_url)
        expected = {worker_name(role, host) for host, roles in NODE_ROLES.items() for role in roles}
        deadline = time.monotonic() + START_TIMEOUT_S
        answered: set[str] = set()
        api_up = False
        while time.monotonic() < deadline:
            if not api_up:
                with contextlib.suppress(httpx.HTTPError):
                    api_up = httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200
            answered |= {name for reply in app.control.ping(timeout=1.0) or [] for name in reply}
            if api_up and expected <= answered:
                return
            dead = [name for name, process in self.processes.items() if process.poll() is not None]
            assert not dead, f"{dead} exited; logs in {self.logs}"
            time.sleep(0.5)
        raise AssertionError(f"not ready: {sorted(expected - answered)}, api {api_up}; logs in {self.logs}")

    def stop(self) -> None:
        stop_processes(self.processes.values())


@pytest.fixture(scope="module")
def nodes(
    service_settings: Settings, s3_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Nodes]:
    """A database and a Redis of this module's own, a bucket on the session's moto server, and both
    nodes' workers with the API, ready."""
    root = tmp_path_factory.mktemp("two-nodes")
    bucket = f"two-nodes-{uuid.uuid4().hex[:8]}"
    S3BlobStore(
        bucket=bucket, endpoint_url=s3_server, access_key_id="test", secret_access_key="test"
    ).ensure_bucket()
    with fresh_database(service_settings) as db_settings, scratch_redis(root / "redis") as broker:
        ensure_lab_models(db_settings)  # the quality lab's models, assembled under the data directory
        port = free_port()
        env = {
            **os.environ,
            **ENV,
            "REPRISE_DATABASE_URL": db_settings.sqlalchemy_url,
            "REPRISE_REDIS_URL": broker.url,
            "REPRISE_DATA_DIR": str(db_settings.data_dir.resolve()),
            "REPRISE_BLOB_BACKEND": "s3",
            "REPRISE_S3_BUCKET": bucket,
            "REPRISE_S3_ENDPOINT_URL": s3_server,
            "REPRISE_S3_ACCESS_KEY_ID": "test",
            "REPRISE_S3_SECRET_ACCESS_KEY": "test",
        }
        env.pop("REPRISE_BLOB_DIR", None)
        settings = db_settings.model_copy(
            update={
                "redis_url": broker.url,
                "blob_backend": BlobBackend.S3,
                "s3_bucket": bucket,
                "s3_endpoint_url": s3_server,
                "lease_s": 6.0,
                "lease_renew_s": 2.0,
                "stuck_after_s": 5,
            }
        )
        running = Nodes(settings, env, root, base_url=f"http://127.0.0.1:{port}")
        try:
            running.start("api", ["api", "--port", str(port)], running.node_env("node-b"))
            for host in NODE_ROLES:
                running.start_node(host)
            running.wait_ready()
            yield running
        finally:
            running.stop()


def _submit(nodes: Nodes, tenant: TenantCredentials, body: dict[str, Any]) -> str:
    response = httpx.post(
        f"{nodes.base_url}/v1/generations", json=body, headers=tenant.auth_headers, timeout=10
    )
    assert response.status_code in (200, 202), response.text
    job_id: str = response.json()["id"]
    return job_id


def _jobs(settings: Settings, ids: list[str]) -> dict[str, Job]:
    with session_scope(settings) as session:
        rows = session.scalars(select(Job).where(Job.id.in_([uuid.UUID(i) for i in ids]))).all()
        session.expunge_all()
    return {str(row.id): row for row in rows}


def _held_by(rows: dict[str, Job], pid: int) -> list[str]:
    """The jobs a run of process `pid` holds now (its lease owner is <role>:<host>:<pid>:<run>)."""
    return [
        job_id
        for job_id, row in rows.items()
        if row.status == "processing" and f":{pid}:" in f"{row.lease_owner or ''}:"
    ]


def _kill_node_a_mid_run(nodes: Nodes, ids: list[str]) -> tuple[list[str], list[str]]:
    """SIGKILL node A once its large worker has finished a job and runs others: (held, done there)."""
    large_a = nodes.pid("node-a", Role.LARGE)
    deadline = time.monotonic() + 120
    held: list[str] = []
    done: list[str] = []
    while not (held and done):
        assert time.monotonic() < deadline, f"node A never ran a job after finishing one: {held}, {done}"
        time.sleep(0.05)
        log = nodes.log("node-a", Role.LARGE)
        done = [job_id for job_id in ids if f"job {job_id} done" in log]
        held = _held_by(_jobs(nodes.settings, ids), large_a)
    nodes.kill_node("node-a")
    # What node A still held when it died: a batching worker may finish a job between the look and the kill.
    held = _held_by(_jobs(nodes.settings, ids), large_a)
    assert held, "node A finished every job it held before the kill"
    return held, done


def _reconcile_until_ended(settings: Settings, ids: list[str]) -> dict[str, Job]:
    """Node B's beat, every second: the reconciler re-sends what node A held once the leases lapse."""
    dispatcher = CeleryDispatcher.for_settings(settings)
    deadline = time.monotonic() + 180
    rows = _jobs(settings, ids)
    while any(row.status not in ("succeeded", "failed", "canceled") for row in rows.values()):
        assert time.monotonic() < deadline, {job_id: row.status for job_id, row in rows.items()}
        reconcile(settings, dispatcher)
        time.sleep(1.0)
        rows = _jobs(settings, ids)
    return rows


def _assert_effects_once(settings: Settings, rows: dict[str, Job], receiver: WebhookReceiver) -> None:
    """One cache entry per miss (none twice), one completed event per job, delivered once."""
    ids = [uuid.UUID(job_id) for job_id in rows]
    with session_scope(settings) as session:
        sources = session.scalars(select(CacheEntry.source_job_id).where(CacheEntry.source_job_id.in_(ids)))
        entries = Counter(str(source) for source in sources)
        completed = dict(
            session.execute(
                select(WebhookDelivery.job_id, func.count(func.distinct(WebhookDelivery.message_id)))
                .where(WebhookDelivery.event == "generation.completed")
                .group_by(WebhookDelivery.job_id)
            ).all()
        )
    assert all(entries[job_id] <= 1 for job_id in rows), entries
    assert all(entries[job_id] == 1 for job_id, row in rows.items() if row.route == "miss"), entries
    for job_id in rows:
        receiver.wait_for(job_id, "generation.completed", timeout_s=60)
        assert completed.get(uuid.UUID(job_id)) == 1, job_id
    with receiver.lock:
        events = [item.json() for item in receiver.received]
    sent = Counter(event["data"]["id"] for event in events if event["type"] == "generation.completed")
    assert all(sent[job_id] == 1 for job_id in rows), sent


def _read_image(nodes: Nodes, tenant: TenantCredentials, job_id: str) -> httpx.Response:
    """GET the job's image, following 202 (still decoding) for up to 30 s."""
    url = f"{nodes.base_url}/v1/generations/{job_id}/image"
    response = httpx.get(url, headers=tenant.auth_headers, timeout=30)
    for _ in range(30):
        if response.status_code != 202:
            break
        time.sleep(1.0)
        response = httpx.get(url, headers=tenant.auth_headers, timeout=30)
    return response


def test_a_node_killed_mid_run_loses_no_job_and_its_images_decode_on_the_other(
    nodes: Nodes, webhook_receiver: WebhookReceiver
) -> None:
    settings = nodes.settings
    tenant = make_tenant(settings, f"two-nodes-{uuid.uuid4().hex[:6]}")
    bodies = [
        {
            "prompt": f"a lighthouse on a cliff, take {i}",
            "seed": i,
            "webhook": webhook_receiver.url,
        }
        for i in range(JOBS)
    ]
    ids = [_submit(nodes, tenant, body) for body in bodies]
    # 1. Every process of node A dies while its large worker runs some of the jobs, after it stored others.
    held, done_on_a = _kill_node_a_mid_run(nodes, ids)
    # 2. They come back through their lapsed leases and the reconciler; every job succeeds.
    rows = _reconcile_until_ended(settings, ids)
    failed = {job_id: (row.status, row.error) for job_id, row in rows.items() if row.status != "succeeded"}
    assert not failed, failed
    # 3. The jobs node A held ran again, on node B; every effect happened once.
    assert all(rows[job_id].attempts >= 2 for job_id in held)
    assert all(rows[job_id].final_latent_key for job_id in done_on_a)  # node A's latents, in S3
    large_b = nodes.log("node-b", Role.LARGE)
    rerun = [job_id for job_id, row in rows.items() if row.attempts >= 2]
    assert all(f"job {job_id} done" in large_b for job_id in rerun), rerun
    _assert_effects_once(settings, rows, webhook_receiver)
    # 4. Node A left the decode ring; node B decodes every latent from S3, those node A stored included.
    client = redis.Redis.from_url(settings.broker_url)
    decode_b = worker_name(Role.DECODE, "node-b")
    deadline = time.monotonic() + 60
    while live_nodes(client, heartbeat_s=settings.read_heartbeat_s) != [decode_b]:
        assert time.monotonic() < deadline, "node A's decode node never left the ring"
        time.sleep(0.5)
    for job_id in ids:
        response = _read_image(nodes, tenant, job_id)
        assert response.status_code == 200, response.text
        assert response.headers["X-Reprise-Node"] == decode_b
        assert response.content.startswith(b"\x89PNG")


def test_a_worker_with_a_local_blob_store_is_refused_beside_another_hosts_workers(nodes: Nodes) -> None:
    env = nodes.node_env("node-c", REPRISE_BLOB_BACKEND="local", REPRISE_BLOB_DIR=str(nodes.logs / "blobs"))
    argv = [sys.executable, "-m", "reprise", "worker", "--role", "io", "--name", "io-local@%h"]
    started = subprocess.run(argv, env=env, capture_output=True, timeout=120, check=False)
    assert started.returncode == 2, started.stderr.decode()[-3000:]
    refusal = started.stderr.decode()
    assert (
        "REPRISE_BLOB_BACKEND=s3" in refusal
        and "node-b" in refusal
        and worker_name(Role.IO, "node-b") in refusal
    )
