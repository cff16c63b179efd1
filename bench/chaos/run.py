"""One chaos scenario's run: the options every scenario shares and the run's state, with the batch
operations every fault uses (submit, cancel, wait until every job ended). The scenarios
(bench.chaos.scenarios) and their faults (bench.chaos.faults) both take a Run; it imports neither."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.chaos.accounting import ScenarioReport, all_terminal, job_ends, running_jobs
from bench.chaos.load import LoadResult, submit_all
from bench.chaos.proxy import NetworkFault
from bench.chaos.receiver import Receiver
from bench.chaos.target import ChaosTarget


@dataclass(frozen=True)
class ChaosOptions:
    # Per fault scenario: a production batch, not a handful (production faults are larger than 12 jobs).
    jobs: int = 100
    load_jobs: int = 500  # submissions of the load scenario
    concurrency: int = 32  # clients of the load scenario
    # How long Redis, Postgres, the webhook receiver, the network or the disk stay broken: a restart's
    # worth, and a minute (a failover, a node reboot), each scenario at each.
    outages_s: tuple[float, ...] = (8.0, 60.0)
    bound_s: float = 300.0  # after the fault, how long a job may take to end before it counts as lost
    network: NetworkFault = field(default_factory=NetworkFault)  # the proxy while the fault lasts


@dataclass
class Run:
    """One scenario's shared state."""

    target: ChaosTarget
    receiver: Receiver
    headers: dict[str, str]
    options: ChaosOptions
    report: ScenarioReport
    tag: str
    outage_s: float = 0.0  # this run's outage length (a scenario of OUTAGES; 0 for the others)
    extra: dict[str, Any] = field(default_factory=dict)  # figures of the scenario's own
    running: frozenset[str] = frozenset()  # the jobs processing when the fault struck (note_running)

    def bodies(self, count: int, *, prompts: list[str] | None = None, seed: int = 1) -> list[dict[str, Any]]:
        texts = prompts or [f"{self.tag} scene {i}: a lighthouse on a cliff, storm {i}" for i in range(count)]
        return [{"prompt": text, "seed": seed, "webhook": self.receiver.url} for text in texts[:count]]

    def submit(self, bodies: list[dict[str, Any]], concurrency: int = 4) -> LoadResult:
        result = submit_all(self.target.base_url, self.headers, bodies, concurrency=concurrency)
        self.report.five_xx += result.five_xx
        refused = {status: n for status, n in result.statuses.items() if status not in (200, 202)}
        if refused.get(422):
            raise RuntimeError(
                "the stack refused the submissions (422): it must allow the bench's webhook receiver "
                "(REPRISE_WEBHOOK_ALLOW_HOSTS=127.0.0.1)"
            )
        return result

    def cancel(self, job_ids: list[str]) -> None:
        client = httpx.Client(base_url=self.target.base_url, headers=self.headers, timeout=30)
        with client, ThreadPoolExecutor(max_workers=8) as pool:
            statuses = list(
                pool.map(lambda job: client.post(f"/v1/generations/{job}/cancel").status_code, job_ids)
            )
        self.report.five_xx += sum(1 for status in statuses if status >= 500)

    def wait_terminal(self, job_ids: list[str], since: float, *, events: bool = True) -> None:
        """Until every job ended (and its completed event reached the receiver), or the bound."""
        while time.time() - since < self.options.bound_s:
            ends = job_ends(self.target.settings, job_ids)
            if all_terminal(ends, job_ids) and (not events or self._delivered(job_ids)):
                return
            time.sleep(0.5)

    def _delivered(self, job_ids: list[str]) -> bool:
        wanted = set(job_ids)
        with self.receiver.lock:
            got = {job for message, job in self.receiver.job_of.items() if message.endswith("completed")}
        return wanted <= got

    def note_running(self, job_ids: list[str]) -> None:
        """The jobs processing now, as the fault strikes: their recovery is also counted apart."""
        self.running = running_jobs(self.target.settings, job_ids)

    def wait_running(self, job_ids: list[str], timeout_s: float = 60.0) -> None:
        """Until some job is being generated, so that the fault lands mid-flight."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            ends = job_ends(self.target.settings, job_ids) or {}
            if any(end.status == "processing" for end in ends.values()):
                return
            time.sleep(0.1)


def new_run(
    target: ChaosTarget,
    receiver: Receiver,
    headers: dict[str, str],
    options: ChaosOptions,
    outage_s: float = 0.0,
) -> Run:
    return Run(
        target, receiver, headers, options, ScenarioReport(), tag=uuid.uuid4().hex[:8], outage_s=outage_s
    )
