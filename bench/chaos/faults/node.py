"""node-loss: a whole worker node disappears with the jobs it holds and its in-memory decode tier.

The bench starts a second node beside the stack's workers: an admit, a large and a decode worker whose
host is REPRISE_HOSTNAME=chaos-node-<tag> (as tests/e2e/test_two_nodes.py runs its nodes), on the
stack's services and settings. Once its large worker holds some of the scenario's jobs, every process
of the node is SIGKILLed, and it is not restarted: a machine gone. Its jobs come back through their
lapsed leases and the reconciler and finish on the stack's own node; every image is then read through
the API (the lost node's decode node must leave the ring, its cached images be decoded elsewhere).

Two hosts need a blob store both read: the stack must use S3 (REPRISE_BLOB_BACKEND=s3; the bench's own
stack runs this scenario on a moto server), or the second node refuses to start (jobs.hosts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from celery import Celery
from sqlalchemy import select

from bench.chaos.faults.disk import PNG
from bench.chaos.run import Run
from bench.chaos.target import group_members
from core.settings import Settings
from core.vocabulary import BlobBackend
from db.engine import session_scope
from db.models import Job

ROLES = ("admit", "large", "decode")
START_TIMEOUT_S = 240.0
HOLD_TIMEOUT_S = 120.0


@dataclass
class Node:
    host: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def names(self) -> set[str]:
        return {f"{role}-lost@{self.host}" for role in self.processes}

    def pids(self) -> set[int]:
        return {pid for process in self.processes.values() for pid in group_members(process.pid)}

    def kill(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def second_node(run: Run) -> Iterator[Node]:
    settings = run.target.settings
    if settings.blob_backend is not BlobBackend.S3:
        raise RuntimeError(
            "node-loss needs a blob store that two hosts share: run the stack with REPRISE_BLOB_BACKEND=s3 "
            "(the bench's own stack does so for this scenario)"
        )
    node = Node(host=f"chaos-node-{run.tag}")
    logs = run.target.data_dir / "logs"
    env = {**run.target.env, "REPRISE_HOSTNAME": node.host}
    try:
        for role in ROLES:
            with (logs / f"{node.host}-{role}.log").open("ab") as log:
                node.processes[role] = subprocess.Popen(
                    [sys.executable, "-m", "reprise", "worker", "--role", role, "--name", f"{role}-lost@%h"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        _wait_answering(settings, node)
        yield node
    finally:
        node.kill()


def _wait_answering(settings: Settings, node: Node) -> None:
    app = Celery(broker=settings.broker_url)
    deadline = time.monotonic() + START_TIMEOUT_S
    answered: set[str] = set()
    while not node.names() <= answered:
        dead = [role for role, process in node.processes.items() if process.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise RuntimeError(
                f"the second node's {dead or 'workers'} did not come up; logs: {node.host}-*.log"
            )
        answered |= {name for reply in app.control.ping(timeout=1.0) or [] for name in reply}


def held_by(settings: Settings, job_ids: list[str], pids: set[int]) -> list[str]:
    """The jobs a run of one of `pids` holds now (a lease owner is <role>:<host>:<pid>:<run>)."""
    ids = [uuid.UUID(job_id) for job_id in job_ids]
    with session_scope(settings, pooled=False) as session:
        rows = session.execute(
            select(Job.id, Job.lease_owner).where(Job.id.in_(ids), Job.status == "processing")
        ).all()
    return [str(job) for job, owner in rows if any(f":{pid}:" in f"{owner or ''}:" for pid in pids)]


def lose_node(run: Run, node: Node, job_ids: list[str]) -> float:
    """SIGKILL the node once its large worker holds some of the jobs (or after HOLD_TIMEOUT_S)."""
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    large = set(group_members(node.processes["large"].pid))
    while not held_by(run.target.settings, job_ids, large) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = node.pids()
    node.kill()
    run.extra["node"] = node.host
    run.extra["held_at_kill"] = len(held_by(run.target.settings, job_ids, pids))
    return time.time()


def read_all(run: Run, job_ids: list[str]) -> None:
    """Every succeeded job's image, read through the API after the loss (202s followed for a minute)."""
    import httpx

    outcomes: Counter[str] = Counter()
    with httpx.Client(base_url=run.target.base_url, headers=run.headers, timeout=60) as client:
        for job_id in job_ids:
            deadline = time.monotonic() + 60
            while True:
                response = client.get(f"/v1/generations/{job_id}/image")
                if response.status_code != 202 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            ok = response.status_code == 200 and response.content.startswith(PNG)
            outcomes["ok" if ok else str(response.status_code)] += 1
    run.extra["reads_after"] = dict(outcomes)
