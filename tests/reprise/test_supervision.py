"""The supervisor restarts what crashes, with backoff, and leaves the other children alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery

from reprise.supervision import SUPERVISOR_ENV, Backoff, Child, Supervisor, tend
from reprise.supervisor import every_role_answers
from tests.support.redis_servers import free_port

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
CRASHER = [sys.executable, "-c", "raise SystemExit(3)"]


def test_backoff_doubles_to_its_ceiling_and_forgets_after_a_healthy_run() -> None:
    backoff = Backoff(first_s=1.0, max_s=30.0, healthy_after_s=60.0)
    delays = [backoff.after_exit(uptime_s=0.5) for _ in range(7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff.after_exit(uptime_s=61.0) == 1.0  # up long enough: a first crash again
    assert backoff.after_exit(uptime_s=1.0) == 2.0


def _child(tmp_path: Path, name: str, argv: list[str]) -> Child:
    return Child(name, argv, tmp_path / "logs" / f"{name}.log", tmp_path / "run" / f"{name}.pid")


def _wait(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_a_killed_child_is_restarted_and_its_sibling_keeps_running(tmp_path: Path) -> None:
    victim, sibling = _child(tmp_path, "worker-io", SLEEPER), _child(tmp_path, "api", SLEEPER)
    said: list[str] = []
    supervisor = Supervisor([victim, sibling], say=said.append, period_s=0.05)
    supervisor.start()
    try:
        first, sibling_pid = victim.pid(), sibling.pid()
        assert first is not None and victim.pid_path is not None
        assert victim.pid_path.read_text().strip() == str(first)
        os.killpg(first, signal.SIGKILL)  # as an operator or the OOM killer would
        _wait(lambda: victim.restarts == 1 and victim.alive())
        second = victim.pid()
        assert second not in (None, first)
        assert victim.pid_path.read_text().strip() == str(second)
        assert sibling.pid() == sibling_pid and sibling.alive()
        assert said[0] == f"worker-io exited with {-signal.SIGKILL}; restart #1 in 1.0s"
        assert said[1].startswith("worker-io restarted")
    finally:
        supervisor.stop()
    assert not victim.alive() and not sibling.alive()
    assert not (tmp_path / "run" / "worker-io.pid").exists()


def test_a_frozen_worker_is_replaced_by_its_stale_liveness_report(tmp_path: Path) -> None:
    """A worker frozen mid-run (SIGSTOP) writes no more verdicts on itself (workers.liveness): three
    periods on, the supervisor ends it and starts another; a sibling that reports nothing is left alone."""
    from core.settings import load_settings
    from reprise.supervisor import worker_health
    from workers.liveness import LivenessReport, report_dir, write_report

    settings = load_settings(data_dir=tmp_path, liveness_period_s=0.2, worker_stall_s=1.0)
    frozen, sibling = _child(tmp_path, "worker-large", SLEEPER), _child(tmp_path, "worker-io", SLEEPER)
    frozen.health = sibling.health = worker_health(settings)
    said: list[str] = []
    supervisor = Supervisor([frozen, sibling], say=said.append, period_s=0.05)
    supervisor.start()
    try:
        first, sibling_pid = frozen.pid(), sibling.pid()
        assert first is not None
        write_report(report_dir(settings), LivenessReport(first, "large-1@here", time.time(), True, "busy"))
        os.kill(first, signal.SIGSTOP)  # hung but alive: its process runs, its reports stop
        _wait(lambda: frozen.restarts == 1 and frozen.alive())
        assert frozen.pid() not in (None, first) and sibling.pid() == sibling_pid
        assert said[0].startswith(f"worker-large (pid {first}) is not alive: no report for")
        assert "frozen" in said[0]
    finally:
        supervisor.stop()


def test_a_crashing_child_waits_longer_each_time(tmp_path: Path) -> None:
    crasher = _child(tmp_path, "beat", CRASHER)
    crasher.start(now=0.0)
    assert crasher.process is not None
    crasher.process.wait()
    said: list[str] = []
    tend([crasher], now=0.1, say=said.append)  # exited after 0.1 s: first delay
    assert crasher.restart_at == pytest.approx(1.1)
    assert not (tmp_path / "run" / "beat.pid").exists()  # nothing to kill while it waits
    tend([crasher], now=0.5, say=said.append)  # not due yet
    assert crasher.restarts == 0
    tend([crasher], now=1.2, say=said.append)  # due: started again
    assert crasher.restarts == 1
    crasher.process.wait()
    tend([crasher], now=1.3, say=said.append)
    assert crasher.restart_at == pytest.approx(3.3)  # second crash in a row: twice as long
    assert [line.split(";")[-1].strip() for line in said if "exited" in line] == [
        "restart #1 in 1.0s",
        "restart #2 in 2.0s",
    ]
    crasher.stop()


def test_reprise_run_gives_each_worker_its_own_metrics_port_when_asked(tmp_path: Path) -> None:
    from core.settings import Settings
    from reprise.supervisor import stack_children

    base = Settings.model_validate({"data_dir": tmp_path, "read_nodes": 2})
    assert not any(
        "--metrics-port" in child.argv for child in stack_children(base, port=8000, flower_port=5555)
    )
    children = stack_children(
        base.model_copy(update={"worker_metrics_port": 9100}), port=8000, flower_port=5555
    )
    ports = {
        child.name: int(child.argv[child.argv.index("--metrics-port") + 1])
        for child in children
        if "--metrics-port" in child.argv
    }
    assert set(ports) == {
        "worker-admit",
        "worker-large",
        "worker-small",
        "worker-decode",
        "worker-io",
        "worker-maintenance",
        "worker-decode-1",
    }
    assert sorted(ports.values()) == list(range(9100, 9107))


def test_reprise_run_gives_maintenance_a_consumer_of_its_own(tmp_path: Path) -> None:
    from core.settings import Settings
    from reprise.supervisor import stack_children

    settings = Settings.model_validate({"data_dir": tmp_path})
    children = {child.name: child for child in stack_children(settings, port=8000, flower_port=5555)}
    io, maintenance = children["worker-io"].argv, children["worker-maintenance"].argv
    assert io[io.index("--queues") + 1] == "webhooks" and io[io.index("--role") + 1] == "io"
    assert maintenance[maintenance.index("--queues") + 1] == "maintenance"


def test_reprise_run_points_only_its_workers_at_other_service_addresses(tmp_path: Path) -> None:
    from core.settings import Settings
    from reprise.supervisor import stack_children

    settings = Settings.model_validate({"data_dir": tmp_path})
    proxied = {"REPRISE_REDIS_URL": "redis://127.0.0.1:16379/0"}
    children = {
        child.name: child
        for child in stack_children(settings, port=8000, flower_port=5555, worker_env=proxied)
    }
    workers = [child for name, child in children.items() if name.startswith("worker-")]
    assert workers and all(
        child.env is not None and child.env["REPRISE_REDIS_URL"] == proxied["REPRISE_REDIS_URL"]
        for child in workers
    )
    assert all(children[name].env is None for name in ("api", "beat", "flower"))  # this process's own
    assert all(child.env is None for child in stack_children(settings, port=8000, flower_port=5555))


def test_waiting_for_the_workers_rides_out_a_broker_that_does_not_answer_yet() -> None:
    """`reprise run` asks every role for a ping before it says the stack is up; a broker out of reach
    (restarting, or reached through an address not up yet) means "not yet", not a crash."""
    port = free_port()  # nothing listens there
    app = Celery(broker=f"redis://127.0.0.1:{port}/0")
    assert every_role_answers(app) is False


FOLLOWER = (
    "from reprise.supervision import follow_supervisor; follow_supervisor(); import time; time.sleep(120)"
)
SUPERVISOR = """
import sys, time
from pathlib import Path
from reprise.supervision import Child
root = Path(sys.argv[1])
child = Child("follower", [sys.executable, "-c", sys.argv[2]], root / "follower.log", root / "follower.pid")
child.start()
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie nobody has reaped yet."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_ends_when_its_supervisor_is_killed(tmp_path: Path) -> None:
    """SIGKILL leaves the supervisor no chance to stop its children; they must not run on as orphans."""
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(tmp_path), FOLLOWER])
    pid_file = tmp_path / "follower.pid"
    try:
        _wait(lambda: pid_file.exists() and pid_file.read_text().strip() != "", timeout_s=30.0)
        follower = int(pid_file.read_text())
        time.sleep(1.0)  # the follower is past its prctl
        assert not _gone(follower)
        supervisor.kill()
        supervisor.wait()
        _wait(lambda: _gone(follower))
        assert _gone(follower), "the child outlived its supervisor"
    finally:
        supervisor.kill()
        if pid_file.exists() and pid_file.read_text().strip() and not _gone(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_child_whose_supervisor_is_already_gone_stops_at_once_and_hides_the_variable() -> None:
    env = {**os.environ, SUPERVISOR_ENV: "1"}  # not its parent: as if the supervisor had died first
    ended = subprocess.run([sys.executable, "-c", FOLLOWER], env=env, timeout=60)
    assert ended.returncode == -signal.SIGTERM
    check = (
        "import os; from reprise.supervision import follow_supervisor as f; f(); print(os.environ.get('"
        + SUPERVISOR_ENV
        + "'))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", check],
        env={**os.environ, SUPERVISOR_ENV: str(os.getpid())},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.strip() == "None"  # its own children follow nobody
