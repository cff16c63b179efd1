"""The stack the chaos benchmark drives, and how it breaks it: SIGKILL to the embedded Postgres or Redis
(then `reprise services up`, as an operator would), or to one process of `reprise run` (whose supervisor
restarts it). Processes are found through their pidfiles under the stack's data directory:
redis/redis.pid and postgres/data/postmaster.pid (reprise/services), run/<name>.pid (reprise/supervision).
The bench acts through the command line only, so it needs the stack's settings (REPRISE_DATA_DIR...)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.chaos.proxy import FaultProxy
from core.settings import Settings

SERVICES = ("redis", "postgres")


@dataclass
class ChaosTarget:
    base_url: str
    settings: Settings
    env: dict[str, str]  # the environment of the stack's own commands
    isolated: bool = False  # the bench's own stack (its settings), not one run with the user's
    proxy: FaultProxy | None = None  # between the workers and Redis and Postgres (the network scenario)

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir.resolve()

    def reprise(self, *args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "reprise", *args]
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def pidfile(self, name: str) -> Path:
        if name == "redis":
            return self.data_dir / "redis" / "redis.pid"
        if name == "postgres":
            return self.data_dir / "postgres" / "data" / "postmaster.pid"
        return self.data_dir / "run" / f"{name}.pid"

    def pid(self, name: str) -> int | None:
        try:
            first = self.pidfile(name).read_text().split()[0]
        except (OSError, IndexError):
            return None
        return int(first) if first.isdigit() else None

    def kill(self, name: str) -> int:
        """SIGKILL a service (and its children) or a supervised process group; returns the pid."""
        pid = self.pid(name)
        if pid is None:
            raise RuntimeError(
                f"no pid for {name} under {self.data_dir}: run the bench with the stack's settings "
                "(REPRISE_DATA_DIR), against a stack started by `reprise run` with embedded services"
            )
        if name in SERVICES:
            for child in _children(pid):
                _kill(child)
            _kill(pid)
        else:
            os.killpg(pid, signal.SIGKILL)
        return pid

    def wipe_redis(self) -> list[str]:
        """Delete the embedded Redis' persistence (its AOF directory and files, an RDB dump), as a broker
        that comes back without its disk would; Redis must be down. Returns what was deleted."""
        root = self.pidfile("redis").parent
        gone = []
        for path in sorted(root.glob("appendonly*")) + sorted(root.glob("*.rdb")):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            gone.append(path.name)
        return gone

    def worker_pids(self) -> dict[str, int | None]:
        """Each supervised worker's pid now (from its pidfile): a change means it exited and was restarted."""
        return {
            path.stem: self.pid(path.stem) for path in sorted((self.data_dir / "run").glob("worker-*.pid"))
        }

    def wait_workers(self, timeout_s: float = 240.0) -> None:
        """Until a worker of every supervised role answers a ping: a stack whose workers reach Redis
        through the bench's proxy comes up only once the proxy listens."""
        from jobs.celery_app import get_celery_app
        from jobs.hosts import answering_roles

        roles = {name.removeprefix("worker-") for name in self.worker_pids()}
        deadline = time.monotonic() + timeout_s
        answered: set[str] = set()
        while time.monotonic() < deadline:
            answered = answering_roles(get_celery_app())
            if roles <= answered:
                return
            time.sleep(1.0)
        raise RuntimeError(
            f"workers {', '.join(sorted(roles - answered))} did not answer within {timeout_s:.0f}s; "
            "with --proxy-ports, start the bench within a few minutes of the stack"
        )

    def restart_services(self) -> None:
        done = self.reprise("services", "up")
        if done.returncode != 0:
            raise RuntimeError(f"`reprise services up` failed: {done.stderr or done.stdout}")

    def wait_restarted(self, name: str, old_pid: int, timeout_s: float = 60.0) -> float:
        """Seconds until the supervisor started `name` again (a new pid in its pidfile)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            pid = self.pid(name)
            if pid is not None and pid != old_pid and _alive(pid):
                return time.monotonic() - started
            time.sleep(0.2)
        raise RuntimeError(
            f"{name} was not restarted within {timeout_s:.0f}s: is the stack run by `reprise run`?"
        )


def _process_stats() -> list[tuple[int, list[str]]]:
    """Every live process's pid and the fields of /proc/<pid>/stat after its name: state, ppid, pgrp..."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while being read
            continue
        found.append((int(entry.name), fields))
    return found


def _children(pid: int) -> list[int]:
    return [child for child, fields in _process_stats() if int(fields[1]) == pid]


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (a supervised child and everything it forked)."""
    return [member for member, fields in _process_stats() if int(fields[2]) == pgid and fields[0] != "Z"]


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
