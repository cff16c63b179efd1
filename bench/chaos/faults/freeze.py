"""worker-freeze: a GPU worker hung but alive. The large worker's process group is SIGSTOPped while it
runs the scenario's jobs: its process stays, its pid answers `kill -0`, and nothing of it moves, the
lease heartbeat included. What must follow (workers.lease, workers.liveness): its runs' leases lapse and
the reconciler sends their jobs to another worker (a co-hosting small worker, or the large one's
replacement), which finishes them within a minute of the freeze; and its verdict on itself goes stale,
so the supervisor of `reprise run` ends it (SIGKILL reaches a stopped process) and starts another.

The fault returns the moment of the freeze: recovery_s counts from it. run.extra gets the frozen pid and
how long the supervisor took to replace it (`replaced_after_s`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from bench.chaos.run import Run

WORKER = "worker-large"
REPLACE_WITHIN_S = 60.0  # the promise: a frozen worker is replaced within a minute


def worker_freeze(run: Run) -> float:
    """SIGSTOP the large worker's group mid-run; wait until the supervisor replaced it."""
    pid = run.target.pid(WORKER)
    if pid is None:
        raise RuntimeError(f"no pid for {WORKER}: run the bench against a stack started by `reprise run`")
    os.killpg(pid, signal.SIGSTOP)
    frozen_at = time.time()
    try:
        replaced_after = run.target.wait_restarted(WORKER, pid, timeout_s=REPLACE_WITHIN_S)
    finally:
        _thaw(pid)  # a frozen worker the supervisor did not end must not stay frozen after the bench
    run.extra["frozen_pid"] = pid
    run.extra["replaced_after_s"] = round(replaced_after, 2)
    return frozen_at


def _thaw(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # ended by the supervisor, as it should be
        os.killpg(pid, signal.SIGCONT)
