"""The settings of the admit worker at scale (issue 17: requests that arrive together are embedded
together), a part of core.settings.Settings, read from the same REPRISE_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class AdmitSettings(BaseSettings):
    """REPRISE_ADMIT_THREADS and REPRISE_EMBED_BATCH_*."""

    admit_threads: int = Field(
        1,
        ge=1,
        le=15,
        description="Threads of an admit worker process. 1: Celery's prefork pool, one admission at a "
        "time per process, with hard time limits. More: Celery's threads pool with this many threads "
        "in one process (one model in memory), their prompts embedded together (embed_batch_*); the "
        "threads pool enforces no time limit. At most 15, the process's database connections (db.engine: "
        "pool 5, overflow 10). 1 by measurement: `reprise bench admission --threads 1|4|8` found the same "
        "admissions per CPU-second at every count, 4 to 8 threads 1.5x one thread's admissions/s only "
        "while the cores had room, nothing more on busy cores, and 2 to 4x the latency (README, "
        "'Admission at scale'): more processes give the same, with time limits.",
    )
    embed_batch_max: int = Field(
        8,
        ge=1,
        le=256,
        description="Most prompts in one embedding call of an admit process with threads "
        "(workers/runtime/embedders/batching.py); 1: no batching. Bounds a batch's padding and latency; "
        "with 8 threads `reprise bench admission` saw mean batches of 1.3 to 2.0, well under it (README, "
        "'Admission at scale').",
    )
    embed_batch_wait_ms: float = Field(
        2.0,
        ge=0,
        le=1000,
        description="How long the first prompt of a batch waits for others (at most; less once "
        "embed_batch_max are in): the most batching adds to a lone admission. 2 ms by measurement: "
        "`reprise bench admission --threads 8 --batch-wait-ms 0|2|10` admitted as many per second at each "
        "(MiniLM on ONNX Runtime costs the same per prompt in a batch as alone), and 10 ms raised the mean "
        "batch from 1.3 to 2.0 and the embed p50 from 51 to 84 ms (README, 'Admission at scale').",
    )
