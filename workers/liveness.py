"""Liveness by progress: a worker is alive when it took or finished work recently, or has none to take.

A process that runs is not a worker that works: a consumer can stop taking messages while its process
answers pings (a failed ack through a lossy network left one idle for good), and a model call can hang
while every thread but one goes on. So liveness is judged on progress (`judge`):
- a run whose model call hung (workers.lease, workers.run_clock) makes the worker not alive, at once;
- a worker with nothing to take (its queues empty) or no free slot (each slot runs a task, bounded by the
  task time limit or the run's deadline) is alive, unless a task has run a minute past the time limit
  (Celery's hard limit ends a prefork child's task at it; nothing ends a threads pool's);
- otherwise it is alive while it took or finished a task within worker_stall_s;
- a broker that cannot be read says nothing about the worker: alive (a restart would not bring Redis
  back, and the worker rides the outage out holding its unacked tasks); its return restarts the clock.

What the judgement reads is the worker's `Pulse`: shared memory made by the main process before the pool
forks, written by the consumer (a task received), the pool (a task finished) and the runs (a hung model
call), in whichever process they run. The main process judges every liveness_period_s
(workers.liveness_watch) and writes its verdict to <data_dir>/liveness/<pid>.json; `reprise worker-alive`,
the supervisor of `reprise run`, compose's healthcheck and the Kubernetes liveness probe read those files
(`read_verdicts`). A report older than three periods is a frozen process (SIGSTOP, a hung main thread):
not alive either. This module imports no Celery and no torch: the probe stays light.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from core.settings import Settings

STALE_PERIODS: Final = 3  # a report this many periods old: its process is frozen
_STARTED, _TAKEN, _FINISHED, _HUNG_RUNS, _HUNG_SINCE = range(5)


@dataclass(frozen=True)
class PulseReading:
    """What a worker did last (wall-clock seconds), and how many of its runs hang now (since when)."""

    started: float
    taken: float
    finished: float
    hung_runs: int
    hung_since: float


class Pulse:
    """A worker's progress in shared memory: made before the pool forks, so every process writes one."""

    def __init__(self, now: float | None = None) -> None:
        self._cells = multiprocessing.get_context("fork").Array(ctypes.c_double, 5, lock=True)
        self._cells[_STARTED] = time.time() if now is None else now

    def took(self) -> None:
        self._cells[_TAKEN] = time.time()

    def finished(self) -> None:
        self._cells[_FINISHED] = time.time()

    def run_hung(self) -> None:
        with self._cells.get_lock():
            if self._cells[_HUNG_RUNS] == 0:
                self._cells[_HUNG_SINCE] = time.time()
            self._cells[_HUNG_RUNS] += 1

    def run_recovered(self) -> None:
        """A run counted by run_hung ended after all (its model call returned)."""
        with self._cells.get_lock():
            self._cells[_HUNG_RUNS] = max(0.0, self._cells[_HUNG_RUNS] - 1)

    def reading(self) -> PulseReading:
        with self._cells.get_lock():
            cells: list[float] = self._cells[:]
        return PulseReading(
            started=cells[_STARTED],
            taken=cells[_TAKEN],
            finished=cells[_FINISHED],
            hung_runs=int(cells[_HUNG_RUNS]),
            hung_since=cells[_HUNG_SINCE],
        )


_pulse: Pulse | None = None


def install() -> Pulse:
    """This worker's pulse (its main process, before the pool forks its children)."""
    global _pulse
    _pulse = Pulse()
    return _pulse


def pulse() -> Pulse:
    """The pulse this process writes: its worker's, or one of its own outside a worker (tests, scripts)."""
    global _pulse
    if _pulse is None:
        _pulse = Pulse()
    return _pulse


@dataclass(frozen=True)
class Verdict:
    alive: bool
    reason: str


def judge(
    reading: PulseReading,
    *,
    now: float,
    queued: int | None,
    free_slots: int,
    stall_s: float,
    broker_back: float = 0.0,
    oldest_task_s: float | None = None,
    overrun_s: float = float("inf"),
) -> Verdict:
    """Whether a worker is alive by its progress (the module's rule). queued: the messages waiting in the
    queues it consumes (None: the broker could not be read); free_slots: its pool's slots holding no task;
    broker_back: when the broker could last not be read. An outage restarts the clock: the consumer
    reconnects on a backoff of its own (within about 12 s of a minute-long outage, docs/operations.md)
    and has stall_s from the broker's return to take work again. oldest_task_s: how long its longest
    running task has run; past overrun_s it is stuck (no pool stops a threads pool's task)."""
    if reading.hung_runs:
        return Verdict(
            False, f"{reading.hung_runs} run(s) hung in a model call for {now - reading.hung_since:.0f}s"
        )
    if oldest_task_s is not None and oldest_task_s > overrun_s:
        return Verdict(False, f"a task has run for {oldest_task_s:.0f}s, past the time limit")
    if queued is None:
        return Verdict(True, "the broker cannot be read: an outage is not this worker's")
    if queued == 0:
        return Verdict(True, "nothing to take")
    if free_slots <= 0:
        return Verdict(True, "every slot runs a task")
    idle_s = now - max(reading.started, reading.taken, reading.finished, broker_back)
    if idle_s < stall_s:
        return Verdict(True, f"took or finished work {idle_s:.0f}s ago")
    return Verdict(
        False,
        f"{queued} message(s) wait in its queues and {free_slots} slot(s) are free, "
        f"but it took and finished nothing for {idle_s:.0f}s: the consumer stopped",
    )


@dataclass(frozen=True)
class LivenessReport:
    """One worker process's verdict on itself, as its main process wrote it."""

    pid: int
    worker: str
    written_at: float
    alive: bool
    reason: str


def report_dir(settings: Settings) -> Path:
    return settings.data_dir.resolve() / "liveness"


def write_report(directory: Path, report: LivenessReport) -> None:
    """Replace the process's report at once (a reader never sees half of one)."""
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{report.pid}.json.tmp"
    partial.write_text(json.dumps(asdict(report)))
    partial.replace(directory / f"{report.pid}.json")


def read_verdicts(
    directory: Path, *, now: float, period_s: float, pid: int | None = None
) -> list[LivenessReport]:
    """The reports of the worker processes that run (the one of `pid` only, when given), each judged
    stale, and so not alive, when STALE_PERIODS periods old. The reports of processes that are gone are
    removed (whichever pid was asked for)."""
    reports = []
    for path in sorted(directory.glob("*.json")):
        if not path.stem.isdigit():
            continue
        if not Path(f"/proc/{path.stem}").exists():
            path.unlink(missing_ok=True)
            continue
        if pid is not None and int(path.stem) != pid:
            continue
        try:
            report = LivenessReport(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue  # replaced while read: the next look reads it whole
        age = now - report.written_at
        if age > STALE_PERIODS * period_s:
            report = LivenessReport(
                report.pid,
                report.worker,
                report.written_at,
                False,
                f"no report for {age:.0f}s: the process is frozen",
            )
        reports.append(report)
    return reports
