"""Keep the stack's processes up: a child that exits is started again after a backoff, the others run on;
a child that runs but is not well (a worker not alive by its progress, `Child.health`) is ended first.

The backoff is systemd's `Restart=on-failure` with `RestartSteps`: the first restart after 1 s, each
next one after twice as long, at most 30 s; a child that stayed up 60 s is healthy again and its next
crash restarts after 1 s: a crash loop must not spin the CPU, a rare crash must cost little.
Each child's pid is in <data_dir>/run/<name>.pid while it runs (the chaos benchmark kills children
through these files); children lead their own process group, so the pid is also the group id.

A child ends with its supervisor. A group of its own keeps Ctrl-C from reaching the children, and also
keeps them running when the supervisor dies without stopping them (SIGKILL, an OOM kill); such
orphans go on consuming the broker's queues, beside the workers of the next `reprise run` on the same
Redis. So each child asks Linux for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG, in
`follow_supervisor`, which `python -m reprise` calls first), a warm shutdown as Ctrl-C gives it; Linux
sends it when the thread that started the child ends, which for a restarted child is the supervising
thread, and that ends only in Supervisor.stop(), which stops every child anyway.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

log = logging.getLogger("reprise.supervisor")

FIRST_DELAY_S = 1.0  # systemd's RestartSec, in effect: a one-off crash costs a second
MAX_DELAY_S = 30.0  # a crash loop retries twice a minute, not faster
HEALTHY_AFTER_S = 60.0  # up this long, a child's next crash counts as the first again
SUPERVISOR_ENV = "REPRISE_SUPERVISOR_PID"  # set in each child's environment: the pid it follows
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass
class Backoff:
    """How long to wait before restarting a child that crashed `failures` times in a row."""

    first_s: float = FIRST_DELAY_S
    max_s: float = MAX_DELAY_S
    healthy_after_s: float = HEALTHY_AFTER_S
    failures: int = 0

    def after_exit(self, uptime_s: float) -> float:
        """Record an exit after uptime_s seconds up; the delay before the next start."""
        if uptime_s >= self.healthy_after_s:
            self.failures = 0
        self.failures += 1
        return float(min(self.max_s, self.first_s * 2 ** (self.failures - 1)))


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    pid_path: Path | None = None
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)
    backoff: Backoff = field(default_factory=Backoff)
    started_at: float = 0.0
    restart_at: float | None = None  # set while the child waits for its restart
    restarts: int = 0
    # Why the running child must be replaced although it runs (a worker not alive by its progress:
    # workers.liveness), given its pid; None while it is well. Unset: only an exit restarts it.
    health: Callable[[int], str | None] | None = field(default=None, repr=False)

    def start(self, now: float | None = None) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.log is None:
            self.log = self.log_path.open("ab")
        # A process group of its own: Ctrl-C reaches the supervisor, which stops children in order.
        # Several torch processes share this machine's cores: one intra-op thread each avoids
        # oversubscription (six-fold slower steps measured on 2 cores with torch's default).
        base = self.env if self.env is not None else dict(os.environ)
        env = {**base, "OMP_NUM_THREADS": base.get("OMP_NUM_THREADS", "1"), SUPERVISOR_ENV: str(os.getpid())}
        self.process = subprocess.Popen(
            self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        self.started_at = time.monotonic() if now is None else now
        self.restart_at = None
        if self.pid_path is not None:
            self.pid_path.parent.mkdir(parents=True, exist_ok=True)
            self.pid_path.write_text(f"{self.process.pid}\n")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def unhealthy(self) -> str | None:
        """Why this running child must be replaced, or None."""
        pid = self.pid()
        if self.health is None or pid is None or not self.alive():
            return None
        return self.health(pid)

    def kill(self) -> None:
        """End the child and its group at once (a frozen or hung one answers no SIGTERM); the next
        round of supervision sees it exited and restarts it."""
        if self.process is not None and self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.process is not None and self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.pid_path is not None:
            self.pid_path.unlink(missing_ok=True)
        if self.log is not None:
            self.log.close()
            self.log = None


Say = Callable[[str], None]


def tend(children: list[Child], *, now: float, say: Say) -> None:
    """One round of supervision: end each child that runs but is not well, schedule the restart of each
    child that exited, start those due."""
    for child in children:
        reason = child.unhealthy()
        if reason is not None:
            say(f"{child.name} (pid {child.pid()}) is not alive: {reason}; replacing it")
            child.kill()
        if child.restart_at is not None:
            if now >= child.restart_at:
                child.start(now)
                child.restarts += 1
                say(f"{child.name} restarted (pid {child.pid()}, restart #{child.restarts})")
            continue
        if child.process is None or child.alive():
            continue
        code = child.process.returncode
        delay = child.backoff.after_exit(now - child.started_at)
        child.restart_at = now + delay
        if child.pid_path is not None:
            child.pid_path.unlink(missing_ok=True)
        say(f"{child.name} exited with {code}; restart #{child.restarts + 1} in {delay:.1f}s")


class Supervisor:
    """Starts the children, tends them on a thread of its own until stop(), then stops them in reverse
    order. Whatever the main thread does meanwhile (waiting for readiness, a demo replay), a child
    that exits is restarted."""

    def __init__(self, children: list[Child], *, say: Say, period_s: float = 0.5) -> None:
        self.children = children
        self.say = say
        self.period_s = period_s
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> None:
        for child in self.children:
            child.start()
        self._thread.start()

    def _loop(self) -> None:
        while not self._halt.wait(self.period_s):
            tend(self.children, now=time.monotonic(), say=self.say)

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join()
        for child in reversed(self.children):
            child.stop()


def follow_supervisor() -> bool:
    """In a child of `reprise run` (SUPERVISOR_ENV set): SIGTERM this process when its parent dies, and
    at once if it already has. The variable is removed, so that the child's own children do not follow
    it. False where there is nothing to follow, or on a system without prctl."""
    expected = os.environ.pop(SUPERVISOR_ENV, None)
    if expected is None or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning(
            "prctl(PR_SET_PDEATHSIG) failed (errno %d): this child outlives its supervisor",
            ctypes.get_errno(),
        )
        return False
    if os.getppid() != int(expected):  # the supervisor died before the prctl: nothing will signal
        os.kill(os.getpid(), signal.SIGTERM)
    return True
