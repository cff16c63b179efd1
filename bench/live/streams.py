"""`reprise bench streams`: do open event streams slow the workers?

Three rounds on a running stack, each the same batch of jobs submitted at once (distinct prompts, cache
off, so every job is a full generation on the large pool): without streams, with `--streams` open event
streams spread over the batch's jobs, and without again (the two baselines bracket drift). A round
reports the workers' run time per job (started_at to completed_at, from the job), the makespan (first
submission to last completion) and whether every stream saw its job's `done`. The streams' cost falls on
the API process (one Redis listener, one feed per followed job: a row read per announcement, whatever
the number of streams; api.feeds) and on Postgres; the workers' figures are what must not move. On one
machine the API, the bench's own streams and the workers share the CPU: `api_cpu_s` (with
--api-metrics-url) and `bench_client_cpu_s` say how much of it the streams took.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from bench.run.outcomes import percentile


@dataclass(frozen=True)
class StreamBenchOptions:
    base_url: str
    api_key: str
    jobs: int = 24
    streams: int = 200
    steps: int = 30
    seed: int = 0
    api_metrics_url: str | None = None  # the API's /metrics: its CPU seconds per round


def _api_cpu_s(options: StreamBenchOptions) -> float | None:
    """The API process's CPU seconds so far (prometheus_client's process_cpu_seconds_total)."""
    if options.api_metrics_url is None:
        return None
    for line in httpx.get(options.api_metrics_url, timeout=10).text.splitlines():
        if line.startswith("process_cpu_seconds_total "):
            return float(line.split()[1])
    return None


def _client(options: StreamBenchOptions, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections + 16, max_keepalive_connections=connections + 16)
    return httpx.AsyncClient(
        base_url=options.base_url,
        headers={"Authorization": f"Bearer {options.api_key}"},
        limits=limits,
        timeout=httpx.Timeout(30.0, read=90.0),
    )


async def _follow(http: httpx.AsyncClient, job_id: str) -> bool:
    """Read the job's stream until `done`; whether it came."""
    async with http.stream("GET", f"/v1/generations/{job_id}/events") as response:
        if response.status_code != 200:
            return False
        async for line in response.aiter_lines():
            if line == "event: done":
                return True
    return False


async def _ended(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    while True:
        response = await http.get(f"/v1/generations/{job_id}", headers={"Prefer": "wait=30"})
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        if body["status"] in ("succeeded", "failed", "canceled"):
            return body


async def _round(options: StreamBenchOptions, streams: int, tag: str) -> dict[str, Any]:
    api_cpu, own_cpu = _api_cpu_s(options), time.process_time()
    async with _client(options, streams + options.jobs) as http:
        started = time.monotonic()
        ids = []
        for n in range(options.jobs):
            body = {
                "prompt": f"a red circle left of a blue square, {tag} {n} {uuid.uuid4().hex[:6]}",
                "seed": options.seed + n,
                "steps": options.steps,
                "cache": "off",
            }
            response = await http.post("/v1/generations", json=body)
            response.raise_for_status()
            ids.append(response.json()["id"])
        follows = [asyncio.create_task(_follow(http, ids[n % len(ids)])) for n in range(streams)]
        jobs = await asyncio.gather(*(_ended(http, job_id) for job_id in ids))
        makespan = time.monotonic() - started
        seen = await asyncio.wait_for(asyncio.gather(*follows), timeout=120) if follows else []
    api_after = _api_cpu_s(options)
    runs = [
        (
            datetime.fromisoformat(job["completed_at"]) - datetime.fromisoformat(job["started_at"])
        ).total_seconds()
        for job in jobs
        if job["status"] == "succeeded"
    ]
    return {
        "streams": streams,
        "jobs": len(ids),
        "succeeded": len(runs),
        "streams_done": sum(seen),
        "run_time_s": {
            "mean": round(statistics.fmean(runs), 4) if runs else None,
            "p50": _rounded(percentile(runs, 50)),
            "p95": _rounded(percentile(runs, 95)),
        },
        "makespan_s": round(makespan, 3),
        "jobs_per_s": round(len(runs) / makespan, 3) if makespan > 0 else None,
        "api_cpu_s": round(api_after - api_cpu, 2) if api_after is not None and api_cpu is not None else None,
        "bench_client_cpu_s": round(time.process_time() - own_cpu, 2),
    }


def _rounded(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def run_stream_bench(options: StreamBenchOptions) -> dict[str, Any]:
    async def main() -> list[dict[str, Any]]:
        await _round(StreamBenchOptions(**{**options.__dict__, "jobs": 2}), 0, "warm-up")  # models loaded
        return [
            await _round(options, 0, "baseline"),
            await _round(options, options.streams, "streams"),
            await _round(options, 0, "baseline-again"),
        ]

    before, loaded, after = asyncio.run(main())
    baseline = [r["run_time_s"]["mean"] for r in (before, after) if r["run_time_s"]["mean"] is not None]
    base_mean = statistics.fmean(baseline) if baseline else None
    loaded_mean = loaded["run_time_s"]["mean"]
    return {
        "options": {key: value for key, value in options.__dict__.items() if key != "api_key"},
        "rounds": {"baseline": before, "streams": loaded, "baseline_again": after},
        "run_time_ratio": round(loaded_mean / base_mean, 3) if base_mean and loaded_mean else None,
        "every_stream_saw_done": loaded["streams_done"] == options.streams,
    }


def report_text(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2)
