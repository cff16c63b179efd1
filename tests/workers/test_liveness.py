"""Liveness by progress (workers.liveness): a worker is alive when it took or finished work recently or has
none to take, not alive when a model call hung or when its consumer stopped while its queues hold work;
the verdicts its main process writes are what `reprise worker-alive` reads, a stale one a frozen process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from workers import liveness
from workers.liveness import LivenessReport, Pulse, PulseReading, judge, read_verdicts, write_report

STALL_S = 45.0


def _reading(*, taken: float = 0.0, finished: float = 0.0, hung_runs: int = 0) -> PulseReading:
    return PulseReading(started=0.0, taken=taken, finished=finished, hung_runs=hung_runs, hung_since=900.0)


def test_a_consumer_that_stopped_while_its_queues_hold_work_is_not_alive() -> None:
    stopped = judge(_reading(taken=950.0), now=1000.0, queued=3, free_slots=1, stall_s=STALL_S)
    assert not stopped.alive and "consumer stopped" in stopped.reason
    # the same worker a moment after it took or finished something
    assert judge(_reading(taken=960.0), now=1000.0, queued=3, free_slots=1, stall_s=STALL_S).alive
    assert judge(
        _reading(taken=100.0, finished=970.0), now=1000.0, queued=3, free_slots=1, stall_s=STALL_S
    ).alive


def test_a_worker_with_nothing_to_take_or_no_free_slot_or_no_broker_is_alive() -> None:
    idle = _reading(taken=0.0)  # took nothing for 1000 s
    assert judge(idle, now=1000.0, queued=0, free_slots=1, stall_s=STALL_S).alive  # nothing to take
    busy = judge(idle, now=1000.0, queued=5, free_slots=0, stall_s=STALL_S)  # each slot runs a task
    assert busy.alive and "every slot" in busy.reason
    outage = judge(idle, now=1000.0, queued=None, free_slots=1, stall_s=STALL_S)  # Redis unreadable
    assert outage.alive and "broker" in outage.reason


def test_the_brokers_return_gives_the_consumer_a_full_stall_period_to_reconnect() -> None:
    """Redis down for a minute: the worker took nothing meanwhile, and its consumer reconnects on a backoff
    of its own; it is judged from the broker's return, not from its last task before the outage."""
    before_outage = _reading(taken=900.0)
    back = judge(before_outage, now=1000.0, queued=4, free_slots=1, stall_s=STALL_S, broker_back=990.0)
    assert back.alive
    still = judge(before_outage, now=1036.0, queued=4, free_slots=1, stall_s=STALL_S, broker_back=990.0)
    assert not still.alive and "46s" in still.reason


def test_a_task_running_a_minute_past_the_time_limit_makes_a_busy_worker_not_alive() -> None:
    """Every slot busy is alive while the tasks are within their limit; a threads pool stops none."""
    busy = _reading(taken=0.0)
    within = judge(
        busy, now=1000.0, queued=5, free_slots=0, stall_s=STALL_S, oldest_task_s=900.0, overrun_s=960.0
    )
    assert within.alive
    stuck = judge(
        busy, now=1000.0, queued=None, free_slots=0, stall_s=STALL_S, oldest_task_s=961.0, overrun_s=960.0
    )
    assert not stuck.alive and "past the time limit" in stuck.reason


def test_a_hung_model_call_makes_the_worker_not_alive_whatever_else_it_did() -> None:
    hung = judge(_reading(taken=999.0, hung_runs=1), now=1000.0, queued=0, free_slots=0, stall_s=STALL_S)
    assert not hung.alive and "hung" in hung.reason and "100s" in hung.reason


def test_the_pulse_is_shared_with_a_forked_child_as_with_a_pool_child() -> None:
    pulse = Pulse(now=1.0)
    child = os.fork()
    if child == 0:  # the pool child: a task finished, a run hung
        pulse.finished()
        pulse.run_hung()
        os._exit(0)
    os.waitpid(child, 0)
    reading = pulse.reading()
    assert reading.finished > 1.0 and reading.hung_runs == 1 and reading.hung_since > 0
    pulse.run_recovered()
    assert pulse.reading().hung_runs == 0


def test_reports_are_read_for_running_processes_and_a_stale_one_is_a_frozen_process(tmp_path: Path) -> None:
    now = time.time()
    write_report(tmp_path, LivenessReport(os.getpid(), "large-1@here", now - 1, True, "nothing to take"))
    (fresh,) = read_verdicts(tmp_path, now=now, period_s=5.0)
    assert fresh.alive and fresh.worker == "large-1@here"
    (stale,) = read_verdicts(tmp_path, now=now + 16, period_s=5.0)  # three periods and more: frozen
    assert not stale.alive and "frozen" in stale.reason
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    write_report(tmp_path, LivenessReport(dead_pid, "io-1@here", now, False, "whatever"))
    assert [report.pid for report in read_verdicts(tmp_path, now=now, period_s=5.0, pid=os.getpid())] == [
        os.getpid()
    ]
    assert not (tmp_path / f"{dead_pid}.json").exists()  # a report of a process that is gone is removed
    assert read_verdicts(tmp_path, now=now, period_s=5.0, pid=dead_pid) == []


def _worker_alive(data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REPRISE_DATA_DIR": str(data_dir)}
    argv = [sys.executable, "-m", "reprise", "worker-alive"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


def test_reprise_worker_alive_exits_by_the_verdicts_of_this_machines_workers(tmp_path: Path) -> None:
    directory = tmp_path / "liveness"
    none_yet = _worker_alive(tmp_path)
    assert none_yet.returncode == 1 and "no worker has reported" in none_yet.stderr
    write_report(directory, LivenessReport(os.getpid(), "admit-1@here", time.time(), True, "nothing to take"))
    alive = _worker_alive(tmp_path)
    assert alive.returncode == 0 and "admit-1@here" in alive.stdout and "alive" in alive.stdout
    stopped = "3 message(s) wait in its queues and 1 slot(s) are free, but it took and finished nothing"
    write_report(directory, LivenessReport(os.getpid(), "admit-1@here", time.time(), False, stopped))
    not_alive = _worker_alive(tmp_path)
    assert (
        not_alive.returncode == 1
        and "NOT alive" in not_alive.stdout
        and "took and finished" in not_alive.stdout
    )


def test_outside_a_worker_the_process_has_a_pulse_of_its_own() -> None:
    assert liveness.pulse() is liveness.pulse()
