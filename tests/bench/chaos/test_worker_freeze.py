"""worker-freeze (bench.chaos.faults.freeze): the large worker SIGSTOPped, hung but alive, is replaced by the
supervisor of `reprise run` through its stale liveness verdict, and the fault reports how long that took;
each scenario's row counts the GPU runs done beyond one per job (duplicate_runs)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import update

from bench.chaos.accounting import ScenarioReport, duplicate_runs
from bench.chaos.receiver import start_receiver
from bench.chaos.run import ChaosOptions, new_run
from bench.chaos.scenarios import SCENARIOS, fault_for
from bench.chaos.target import ChaosTarget
from core.settings import Settings, load_settings
from db.engine import session_scope
from db.models import Job
from reprise.supervision import Child, Supervisor
from reprise.supervisor import worker_health
from tests.workers.conftest import make_job, make_tenant
from workers.liveness import LivenessReport, report_dir, write_report

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_worker_freeze_is_a_scenario_and_its_row_has_duplicate_runs() -> None:
    assert "worker-freeze" in SCENARIOS and fault_for("worker-freeze").__name__ == "worker_freeze"
    row = ScenarioReport(duplicate_runs=2).as_json()
    assert {"lost", "duplicated", "recovery_s", "duplicate_runs"} <= set(row) and row["duplicate_runs"] == 2


@pytest.mark.integration
def test_duplicate_runs_count_each_jobs_runs_beyond_its_first(db_settings: Settings) -> None:
    tenant = make_tenant(db_settings)
    jobs = [make_job(db_settings, tenant, f"a fox {n}") for n in range(4)]
    with session_scope(db_settings) as session:
        for job_id, attempts in zip(jobs, (0, 1, 2, 3), strict=True):  # never run, once, twice, thrice
            session.execute(update(Job).where(Job.id == job_id).values(attempts=attempts))
    assert duplicate_runs(db_settings, [str(job) for job in jobs]) == 0 + 0 + 1 + 2


def test_a_frozen_large_worker_is_replaced_by_the_supervisor(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, liveness_period_s=0.2, worker_stall_s=1.0)
    logs, pids = tmp_path / "logs", tmp_path / "run"
    worker = Child("worker-large", SLEEPER, logs / "worker-large.log", pids / "worker-large.pid")
    worker.health = worker_health(settings)
    supervisor = Supervisor([worker], say=lambda _: None, period_s=0.05)
    receiver = start_receiver()
    supervisor.start()
    try:
        first = worker.pid()
        assert first is not None
        write_report(report_dir(settings), LivenessReport(first, "large-1@here", time.time(), True, "busy"))
        run = new_run(ChaosTarget("http://127.0.0.1:9", settings, env={}), receiver, {}, ChaosOptions())
        frozen_at = fault_for("worker-freeze")(run)
        assert time.time() - frozen_at < 10  # three stale periods and the supervisor's round
        assert run.extra["frozen_pid"] == first and run.extra["replaced_after_s"] < 10
        assert worker.pid() != first and worker.alive()
        with pytest.raises(ProcessLookupError):
            os.kill(first, signal.SIGCONT)  # ended, not left frozen
    finally:
        supervisor.stop()
        receiver.stop()
