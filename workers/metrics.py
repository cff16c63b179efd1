"""The workers' Prometheus metrics, exported by every worker process.

A worker's pool children write their samples to files under PROMETHEUS_MULTIPROC_DIR (prometheus_client's
multiprocess mode, set up by `reprise worker` before anything imports prometheus_client); the worker's main
process serves their sum on REPRISE_WORKER_METRICS_PORT (`serve_worker_metrics`).

Labels stay few: the role (admit, large, small, decode, io), the configured model's name, the route (hit,
miss), the outcome, the queue, the task's name. Never a job, a tenant or a prompt.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
SECONDS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
STEP_SECONDS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH: Final = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
STEPS: Final = (0, 1, 2, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 75, 100)  # MoDM's K: 5..25 of T = 50

JOBS = Counter(
    "reprise_worker_jobs_total",
    "Generations a worker ended, by role, model, route (hit, miss) and outcome (succeeded, failed, "
    "canceled, rerouted: a hit run as a miss).",
    ["role", "model", "route", "outcome"],
)
SKIPPED_STEPS = Histogram(
    "reprise_worker_skipped_steps",
    "k, the denoising steps a generation skipped thanks to the cache (0 on a miss).",
    ["role", "route"],
    buckets=STEPS,
)
DENOISER_EVALUATIONS = Counter(
    "reprise_worker_denoiser_evaluations_total",
    "Full UNet evaluations run (a classifier-free-guidance batch counts one), by role and model.",
    ["role", "model"],
)
STEP_CACHE_REUSED = Counter(
    "reprise_worker_step_cache_reused_steps_total",
    "Denoising steps that reused a full call's work (REPRISE_STEP_CACHE: TeaCache runs no call, "
    "DeepCache its shallow branch), by role and model.",
    ["role", "model"],
)
STEP_SECONDS_METRIC = Histogram(
    "reprise_worker_step_duration_seconds",
    "Wall time of one denoising step, by role and model.",
    ["role", "model"],
    buckets=STEP_SECONDS,
)
BATCH_SIZE = Histogram(
    "reprise_worker_batch_size",
    "Jobs one denoising step ran in one UNet call (step-level batching: workers.runtime.batch_loop).",
    ["role"],
    buckets=BATCH,
)
QUEUE_WAIT = Histogram(
    "reprise_worker_queue_wait_seconds",
    "From enqueue to a worker starting the task: admission since submission, generation since admission.",
    ["queue"],
    buckets=SECONDS,
)
STAGE_SECONDS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
JOB_STAGE_SECONDS = Histogram(
    "reprise_worker_job_stage_seconds",
    "A completed job's worker time in one stage (workers.stages: claim, read, encode_prompt, denoise, "
    "vae_decode, vae_encode, score, store, cache_fill, complete, notify), by role, route and stage; "
    "denoise is the job's share of its batched steps.",
    ["role", "route", "stage"],
    buckets=STAGE_SECONDS,
)
RUN_SECONDS = Histogram(
    "reprise_worker_run_duration_seconds",
    "A generation's denoising and decoding, by role, model and route.",
    ["role", "model", "route"],
    buckets=SECONDS,
)
WEBHOOK_DEAD_LETTERS = Counter(
    "reprise_worker_webhook_dead_letters_total",
    "Webhook deliveries whose last attempt failed (kept as failed, listed by GET /v1/webhook-deliveries), "
    "by event.",
    ["event"],
)
WEBHOOK_DEFERRALS = Counter(
    "reprise_worker_webhook_deferrals_total",
    "Webhook attempts queued again because their endpoint's slots were all taken.",
)
TASKS = Counter(
    "reprise_worker_tasks_total", "Celery tasks a worker ran, by task and state.", ["task", "state"]
)
TASK_SECONDS = Histogram(
    "reprise_worker_task_duration_seconds", "Celery task wall time, by task.", ["task"], buckets=SECONDS
)
MODEL_LOAD_SECONDS = Histogram(
    "reprise_worker_model_load_duration_seconds",
    "Loading a role's model onto the device (a process start or a role switch).",
    ["role"],
    buckets=SECONDS,
)
ROLE_SWITCH_SECONDS = Histogram(
    "reprise_worker_role_switch_duration_seconds",
    "A pool move (MoDM 5.3): releasing one role's model and hosting the other's.",
    ["from_role", "to_role"],
    buckets=SECONDS,
)
DECODE_SECONDS = Histogram(
    "reprise_worker_vae_decode_duration_seconds",
    "One VAE decode of a latent to pixels (LatentBox 4.1), by role.",
    ["role"],
    buckets=SECONDS,
)
CODEC_SECONDS = Histogram(
    "reprise_worker_codec_duration_seconds",
    "pcodec latent compression (encode) and decompression (decode).",
    ["operation"],
    buckets=STEP_SECONDS,
)
GPU_MEMORY = Gauge(
    "reprise_worker_gpu_memory_bytes",
    "CUDA memory held by the worker's processes (allocated, reserved), after each generation.",
    ["role", "kind"],
    multiprocess_mode="livesum",
)


@contextmanager
def timed(histogram: Histogram, **labels: str) -> Iterator[None]:
    """Observe the block's wall time on `histogram` with `labels`."""
    started = time.perf_counter()
    try:
        yield
    finally:
        histogram.labels(**labels).observe(time.perf_counter() - started)


def observe_steps(
    role: str, model: str, step_ms: Sequence[float], *, device: object, reused: int = 0
) -> None:
    """A denoising run's steps: each one's time, the full evaluations and the reusing steps (a step
    cache's) they were, and the device's memory."""
    histogram = STEP_SECONDS_METRIC.labels(role=role, model=model)
    for ms in step_ms:
        histogram.observe(ms / 1e3)
    DENOISER_EVALUATIONS.labels(role=role, model=model).inc(len(step_ms) - reused)
    if reused:
        STEP_CACHE_REUSED.labels(role=role, model=model).inc(reused)
    observe_gpu_memory(role, device)


def observe_gpu_memory(role: str, device: object) -> None:
    """Record CUDA's allocated and reserved bytes; nothing on a CPU."""
    if getattr(device, "type", None) != "cuda":
        return
    import torch

    GPU_MEMORY.labels(role=role, kind="allocated").set(torch.cuda.memory_allocated(device))  # type: ignore[arg-type]
    GPU_MEMORY.labels(role=role, kind="reserved").set(torch.cuda.memory_reserved(device))  # type: ignore[arg-type]


def serve_worker_metrics(port: int, address: str) -> WSGIServer:
    """Serve the sum of this worker's processes' metrics on address:port (GET /metrics)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    server, _thread = start_http_server(port, addr=address, registry=registry)
    return server


def process_exited(pid: int) -> None:
    """Drop a dead pool child's live gauges (its counters stay counted)."""
    if os.environ.get(MULTIPROC_ENV):
        mark_process_dead(pid)  # type: ignore[no-untyped-call]
