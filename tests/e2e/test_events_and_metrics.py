"""Observability on the live stack: a job's event stream (progress, then done), its queue place, 200 streams
at once, the metrics every worker process exports (scraped over HTTP), and JSON log lines that carry the
job's id through the API and the workers."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from reprise_client import Client, Generation

from db.tenants import TenantCredentials
from tests.e2e.conftest import Stack, make_tenant

pytestmark = pytest.mark.integration

PROMPT = "a big green triangle above a small yellow circle"
STREAMS = 200
STEPS = 60  # a few seconds on the lab's models: progress is written every half second


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> TenantCredentials:
    return make_tenant(stack.settings, f"events-{uuid.uuid4().hex[:8]}")


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def test_a_job_streams_its_progress_and_ends_with_done(stack: Stack, tenant: TenantCredentials) -> None:
    with Client(stack.base_url, tenant.api_key) as reprise:
        job = reprise.create(PROMPT, seed=11, steps=STEPS, cache="off")  # long enough to see it run
        seen: list[Generation] = list(reprise.events(job.id, timeout=120))
    assert seen[-1].status == "succeeded" and seen[-1].progress is not None, seen
    assert seen[-1].progress.step == seen[-1].progress.total == STEPS
    assert all(not event.done for event in seen[:-1])
    running = [event.progress.step for event in seen if event.status == "processing" and event.progress]
    assert running and running == sorted(running), seen  # at least its first step, in order
    assert seen[0].status in ("starting", "processing")


def test_a_waiting_job_knows_its_place(stack: Stack, tenant: TenantCredentials) -> None:
    # The large worker, and the small one co-hosting the large model, run up to max_batch jobs each at
    # once: four more than both hold must wait behind them.
    count = 2 * stack.settings.max_batch + 4
    with Client(stack.base_url, tenant.api_key) as reprise:
        jobs, places = [], []
        for n in range(count):  # each job's place read as its client would, right after submitting it
            jobs.append(reprise.create(PROMPT.replace("big", f"big {n}"), seed=100 + n, cache="off"))
            places.append(reprise.get(jobs[-1].id).queue)
        for job in jobs:
            reprise.wait(job.id, timeout=240)
    waiting = [place for place in places if place is not None]
    assert waiting, f"{count} jobs on two workers holding {stack.settings.max_batch} each: some must wait"
    assert all(place.position >= 1 for place in waiting)
    assert max(place.position for place in waiting) >= 2


async def _follow(http: httpx.AsyncClient, job_id: str) -> str | None:
    async with http.stream("GET", f"/v1/generations/{job_id}/events") as response:
        assert response.status_code == 200
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: ") and event == "done":
                status: str = json.loads(line.removeprefix("data: "))["status"]
                return status
    return None


def test_two_hundred_open_streams_all_see_their_jobs_end(stack: Stack, tenant: TenantCredentials) -> None:
    with Client(stack.base_url, tenant.api_key) as reprise:
        jobs = [reprise.create(PROMPT.replace("green", f"green {n}"), seed=200 + n) for n in range(4)]

    async def run() -> list[str | None]:
        limits = httpx.Limits(max_connections=STREAMS + 10, max_keepalive_connections=STREAMS)
        headers = {"Authorization": f"Bearer {tenant.api_key}"}
        async with httpx.AsyncClient(
            base_url=stack.base_url, headers=headers, limits=limits, timeout=httpx.Timeout(10.0, read=60.0)
        ) as http:
            follows = [_follow(http, jobs[n % len(jobs)].id) for n in range(STREAMS)]
            return await asyncio.wait_for(asyncio.gather(*follows), timeout=240)

    assert asyncio.run(run()) == ["succeeded"] * STREAMS


def test_every_worker_exports_its_metrics_and_the_api_its_gauges(
    stack: Stack, tenant: TenantCredentials
) -> None:
    with Client(stack.base_url, tenant.api_key) as reprise:
        job = reprise.create(PROMPT.replace("triangle", "square"), seed=300)
        reprise.wait(job.id, timeout=120)
    large = httpx.get(f"http://127.0.0.1:{stack.metrics_ports['large']}/metrics", timeout=10).text
    done = _samples(large, "reprise_worker_jobs_total")
    assert any(
        labels["outcome"] == "succeeded" and labels["route"] == "miss" and value >= 1
        for labels, value in done
    )
    assert any(v >= 10 for _, v in _samples(large, "reprise_worker_denoiser_evaluations_total"))
    assert any(v >= 10 for _, v in _samples(large, "reprise_worker_step_duration_seconds_count"))
    assert any(
        labels == {"queue": "cache_miss"} and v >= 1
        for labels, v in _samples(large, "reprise_worker_queue_wait_seconds_count")
    )
    tasks = _samples(large, "reprise_worker_tasks_total")
    assert any(labels == {"task": "reprise.generate", "state": "success"} and v >= 1 for labels, v in tasks)
    assert any(v >= 1 for _, v in _samples(large, "reprise_worker_model_load_duration_seconds_count"))
    admit = httpx.get(f"http://127.0.0.1:{stack.metrics_ports['admit']}/metrics", timeout=10).text
    assert any(
        labels == {"queue": "admit"} and v >= 1
        for labels, v in _samples(admit, "reprise_worker_queue_wait_seconds_count")
    )
    api = httpx.get(f"{stack.base_url}/metrics", timeout=10).text
    assert {labels["queue"] for labels, _ in _samples(api, "reprise_queue_depth")} >= {
        "admit",
        "cache_miss",
        "cache_hit",
    }
    assert {labels["status"] for labels, _ in _samples(api, "reprise_jobs_in_flight")} == {
        "starting",
        "processing",
    }
    footprint = {(labels["scope"], labels["tier"]): v for labels, v in _samples(api, "reprise_cache_bytes")}
    assert footprint[("tenant", "final")] > 0 and footprint[("tenant", "states")] > 0


def test_a_jobs_log_lines_carry_its_id_in_every_process(stack: Stack, tenant: TenantCredentials) -> None:
    with Client(stack.base_url, tenant.api_key) as reprise:
        job = reprise.create(PROMPT.replace("circle", "square"), seed=400, cache="off")  # on the large pool
        reprise.wait(job.id, timeout=120)

    def lines(name: str) -> list[dict[str, str]]:
        found = []
        for line in (stack.logs / f"{name}.log").read_text().splitlines():
            if line.startswith("{") and job.id in line:
                found.append(json.loads(line))
        return found

    # A worker logs "done" after it committed the job's end, which the client may see first: give the
    # line a few seconds to reach the file.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(
        line["message"].startswith(f"job {job.id} done") for line in lines("worker-large")
    ):
        time.sleep(0.2)
    api = lines("api")
    assert any(line["message"].startswith("job created") and line["tenant"] for line in api)
    # Every line logged while the task ran carries the job (the main process's "received" line has only
    # the task's arguments).
    large = [line for line in lines("worker-large") if "task_id" in line]
    assert large and all(line["job_id"] == job.id and line["tenant"] for line in large)
    assert {line["queue"] for line in large} == {"cache_miss"}
    assert any(line["message"].startswith(f"job {job.id} done") for line in large)
    assert any(line.get("role") == "admit" and line.get("job_id") == job.id for line in lines("worker-admit"))
