"""`reprise bench soak`: the load loop, the drain and the report.

A pacer sends `rate` requests a second (bench.soak.mix draws each: image generations with the cache on
or off, a few short videos, reads of finished images, polls, cancels), each on a small thread pool so a
slow answer does not hold the next; the generations in flight are capped so the load stays moderate
(what the stack can serve, not a queue growing for half an hour). Which jobs ended is read from
Postgres (the bench shares the stack's settings, as the chaos bench does), not asked over HTTP, so the
request count is the load's own. Memory is sampled meanwhile (bench.soak.memory). When the time is up
the bench waits up to `drain_s` for every accepted job to end; those that did not are `stuck`.

The report: {minutes, requests, errors, stuck, p99_ms_by_minute: [...], rss_mb: {process: {start, end,
max}}}; the RSS samples themselves, and each process's growth after the warm-up, go to `samples_path`.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.chaos.accounting import job_ends
from bench.chaos.runner import issue_admin_key
from bench.chaos.target import ChaosTarget
from bench.soak.memory import RssSampler
from bench.soak.mix import Mix, Op, choose, is_error, memory_summary, p99_by_minute, prompt
from core.vocabulary import TERMINAL_STATUSES

WARMUP_S = 300.0  # the issue's bar: no process grows by more than 20% after its first five minutes
CLIENTS = 8  # requests in flight at most; a slower stack gets fewer requests, not a pile of them
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SoakOptions:
    seconds: float = 1800.0
    rate: float = 2.0  # requests per second
    max_inflight: int = 6  # generations submitted and not ended
    video: bool = True
    video_frames: int = 4
    drain_s: float = 300.0
    sample_every_s: float = 10.0
    seed: int = 0


@dataclass
class _State:
    """What the load knows, shared by the pacer, the request threads and the status reader."""

    inflight: set[str] = field(default_factory=set)
    accepted: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # succeeded image jobs
    samples: list[tuple[float, float]] = field(default_factory=list)  # (s since start, ms)
    requests: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Load:
    def __init__(self, target: ChaosTarget, headers: dict[str, str], options: SoakOptions) -> None:
        self.target, self.options = target, options
        self.client = httpx.Client(base_url=target.base_url, headers=headers, timeout=REQUEST_TIMEOUT_S)
        self.state = _State()
        self.rng = random.Random(options.seed)
        self.mix = Mix(max_inflight=options.max_inflight, video=options.video)
        self.started = time.monotonic()
        self.serial = 0

    def _call(
        self, op: Op, method: str, url: str, body: dict[str, Any] | None = None
    ) -> httpx.Response | None:
        began = time.monotonic()
        answer: httpx.Response | None = None
        try:
            answer = self.client.request(method, url, json=body)
        except httpx.HTTPError:
            answer = None
        ms = (time.monotonic() - began) * 1000
        status = None if answer is None else answer.status_code
        with self.state.lock:
            self.state.requests += 1
            self.state.samples.append((began - self.started, ms))
            if is_error(op, status):
                self.state.errors += 1
                kind = f"{op.value} {status or 'no answer'}"
                self.state.error_kinds[kind] = self.state.error_kinds.get(kind, 0) + 1
        return answer

    def _submit(self, op: Op, body: dict[str, Any]) -> str | None:
        answer = self._call(op, "POST", "/v1/generations", body)
        if answer is None or answer.status_code not in (200, 202):
            return None
        job_id = str(answer.json()["id"])
        with self.state.lock:
            self.state.accepted.append(job_id)
            self.state.inflight.add(job_id)
        return job_id

    def send(self, op: Op, serial: int) -> None:
        """One request of the mix (a cancel is its submission and its cancel)."""
        text = prompt(self.rng, op, serial)
        if op is Op.IMAGE_CACHED:
            self._submit(op, {"prompt": text, "seed": serial % 3})
        elif op is Op.IMAGE_UNCACHED:
            self._submit(op, {"prompt": text, "seed": serial, "cache": "off"})
        elif op is Op.VIDEO:
            self._submit(op, {"prompt": text, "kind": "video", "frames": self.options.video_frames})
        elif op is Op.CANCEL:
            job_id = self._submit(Op.IMAGE_UNCACHED, {"prompt": text, "seed": serial, "cache": "off"})
            if job_id is not None:
                self._call(op, "POST", f"/v1/generations/{job_id}/cancel")
        else:
            with self.state.lock:
                job_id = self.rng.choice(self.state.images) if self.state.images else None
            if job_id is not None:
                suffix = "/image" if op is Op.READ else ""
                self._call(op, "GET", f"/v1/generations/{job_id}{suffix}")

    def refresh(self) -> None:
        """Which of the jobs in flight ended (read from Postgres); succeeded images become readable."""
        with self.state.lock:
            ids = list(self.state.inflight)
        ends = job_ends(self.target.settings, ids) if ids else {}
        if ends is None:  # Postgres unreadable this time: try at the next refresh
            return
        done = {job for job, end in ends.items() if end.status in TERMINAL_STATUSES}
        with self.state.lock:
            self.state.inflight -= done
            self.state.images.extend(job for job in done if ends[job].status == "succeeded")

    def next_op(self) -> Op:
        with self.state.lock:
            inflight, finished = len(self.state.inflight), len(self.state.images)
        return choose(self.rng, self.mix, inflight=inflight, finished_images=finished)


def _pace(load: _Load, pool: ThreadPoolExecutor, until: float) -> None:
    """Send `rate` requests a second until `until`, at most CLIENTS at a time."""
    slots = threading.BoundedSemaphore(CLIENTS)
    period, next_at, last_refresh = 1.0 / load.options.rate, time.monotonic(), 0.0
    while (now := time.monotonic()) < until:
        if now - last_refresh >= 1.0:
            load.refresh()
            last_refresh = now
        if now < next_at:
            time.sleep(min(next_at - now, 0.2))
            continue
        next_at += period
        if not slots.acquire(blocking=False):
            continue  # every client is busy: this request is not sent
        load.serial += 1
        future = pool.submit(load.send, load.next_op(), load.serial)
        future.add_done_callback(lambda _: slots.release())


def _drain(load: _Load, drain_s: float) -> int:
    """Wait until every accepted job ended, at most drain_s; how many did not."""
    deadline = time.monotonic() + drain_s
    while True:
        ends = job_ends(load.target.settings, load.state.accepted) or {}
        left = [
            job for job in load.state.accepted if job not in ends or ends[job].status not in TERMINAL_STATUSES
        ]
        if not left or time.monotonic() >= deadline:
            return len(left)
        time.sleep(2.0)


def run_soak(
    target: ChaosTarget, options: SoakOptions, *, samples_path: Path | None = None
) -> dict[str, Any]:
    """Keep the mixed load on the stack for options.seconds; the report (module docstring)."""
    headers = {"Authorization": f"Bearer {issue_admin_key(target)}"}
    load = _Load(target, headers, options)
    sampler = RssSampler(target.data_dir, every_s=options.sample_every_s).start()
    load.started = time.monotonic()
    with ThreadPoolExecutor(max_workers=CLIENTS, thread_name_prefix="soak") as pool:
        _pace(load, pool, load.started + options.seconds)
    sampler.stop()
    stuck = _drain(load, options.drain_s)
    load.client.close()
    minutes = max(1, math.ceil(options.seconds / 60))
    memory = {name: memory_summary(samples, warmup_s=WARMUP_S) for name, samples in sampler.samples.items()}
    if samples_path is not None:
        samples_path.write_text(
            json.dumps(
                {
                    "rss_mb_samples": sampler.samples,
                    "growth_after_warmup": {
                        name: None
                        if m is None
                        else {"at_warmup": m.after_warmup, "growth": m.growth_after_warmup}
                        for name, m in memory.items()
                    },
                    "error_kinds": load.state.error_kinds,
                    "accepted": len(load.state.accepted),
                    "warmup_s": WARMUP_S,
                },
                indent=1,
            )
            + "\n"
        )
    return {
        "minutes": round(options.seconds / 60, 3),
        "requests": load.state.requests,
        "errors": load.state.errors,
        "stuck": stuck,
        "p99_ms_by_minute": p99_by_minute(load.state.samples, minutes=minutes),
        "rss_mb": {name: m.contract() for name, m in memory.items() if m is not None},
    }
