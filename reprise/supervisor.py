"""`reprise run`: start every process of the stack, watch them, stop them all on Ctrl-C.

Each process logs to <data_dir>/logs/<name>.log; the terminal shows only where things are,
the demo replay's progress and its summary.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

import httpx

from core.settings import Settings
from core.vocabulary import Role

STACK_ROLES = (Role.ADMIT, Role.LARGE, Role.SMALL, Role.DECODE, Role.IO)


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = self.log_path.open("ab")
        # A process group of its own: Ctrl-C reaches the supervisor, which stops children in order.
        # Several torch processes share this machine's cores: one intra-op thread each avoids
        # oversubscription (six-fold slower steps measured on 2 cores with torch's default).
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        self.process = subprocess.Popen(
            self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.process is None:
            return
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()


def _reprise(*args: str) -> list[str]:
    return [sys.executable, "-m", "reprise", *args]


def stack_children(settings: Settings, *, port: int, flower_port: int) -> list[Child]:
    logs = settings.data_dir.resolve() / "logs"
    children = [Child("api", _reprise("api", "--port", str(port)), logs / "api.log")]
    for role in STACK_ROLES:
        children.append(
            Child(
                f"worker-{role.value}", _reprise("worker", "--role", role.value), logs / f"worker-{role}.log"
            )
        )
    children.append(Child("beat", _reprise("beat"), logs / "beat.log"))
    children.append(Child("flower", _reprise("flower", "--port", str(flower_port)), logs / "flower.log"))
    return children


def wait_ready(base_url: str, children: list[Child], timeout_s: float = 180.0) -> None:
    """Wait for /readyz and for a worker of every role to answer a ping."""
    from jobs.celery_app import get_celery_app

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [child.name for child in children if not child.alive()]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited during start-up; see {children[0].log_path.parent}")
        try:
            ready = httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            ready = False
        if ready:
            replies = get_celery_app().control.ping(timeout=1.0) or []
            names = {name for reply in replies for name in reply}
            if all(any(name.startswith(f"{role.value}-") for name in names) for role in STACK_ROLES):
                return
        time.sleep(1.0)
    raise RuntimeError(f"the stack was not ready after {timeout_s:.0f}s; see {children[0].log_path.parent}")


def run_stack(settings: Settings, *, port: int, flower_port: int, demo_prompts: int) -> int:
    children = stack_children(settings, port=port, flower_port=flower_port)
    stopping = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    base_url = f"http://127.0.0.1:{port}"
    try:
        for child in children:
            child.start()
        print(f"starting {len(children)} processes; logs in {children[0].log_path.parent}", flush=True)
        wait_ready(base_url, children)
        print(f"API        {base_url}  (docs: {base_url}/docs, metrics: {base_url}/metrics)")
        print(f"Flower     http://127.0.0.1:{flower_port}")
        print(f"Postgres   {settings.sqlalchemy_url}")
        print(f"Redis      {settings.broker_url}")
        if demo_prompts > 0:
            from bench.demo import run_demo

            run_demo(settings, base_url=base_url, prompts=demo_prompts, should_stop=lambda: stopping)
        print("the stack is up; Ctrl-C stops it", flush=True)
        while not stopping:
            dead = [child.name for child in children if not child.alive()]
            if dead:
                print(f"{', '.join(dead)} exited; stopping the stack (see the logs)", file=sys.stderr)
                return 1
            time.sleep(1.0)
        return 0
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        print("stopping...", flush=True)
        for child in reversed(children):
            child.stop()
