"""Admission: how the admit worker turns a request into a cache hit or a miss: the lookup mode, the
k table and quality knob (NIRVANA 5.3), the match predictor (NIRVANA 5.2), and how many prompts an
admit process embeds at once."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from core.vocabulary import HitPolicy, LookupMode


class AdmissionSettings(BaseSettings):
    """Admission: lookup mode, hit policy, k selection, the match predictor and the admit worker.

    The admit pool embeds each prompt, asks the predictor whether a search is worth it, finds the
    nearest cached entry and picks k, the steps a hit skips, from the similarity.
    """

    lookup_mode: LookupMode = Field(
        LookupMode.TEXT_TO_TEXT,
        description="text (NIRVANA) or image (MoDM). Unset on the quality lab's models: image, in the lab's "
        "attribute space (REPRISE_OPEN_CLIP_MODEL=lab:attributes), where it measured a drop within 0.02 "
        "with about a third of the compute saved live (docs/results/quality-lab.md); text elsewhere.",
    )
    hit_policy: HitPolicy = Field(HitPolicy.RESUME, description="resume (NIRVANA) or refine (MoDM).")
    k_table: str = Field(
        "auto",
        description="Threshold table: auto (the lookup mode's preset: nirvana-t2t for text, modm-t2i for "
        "image; on the quality lab's models the table profiled there, lab-minilm or lab-t2i), a preset "
        "name, or a custom table 'sim:k,sim:k,...' (jobs/policies/k_selection.py).",
    )
    k_table_profiled_with: str | None = Field(
        None,
        description="The embedder a custom k table was profiled with (e.g. minilm:all-MiniLM-L6-v2 or "
        "open_clip:ViT-L-14); a table profiled with another embedder than the one in use is a warning.",
    )
    quality_knob: int = Field(
        0, ge=-3, le=3, description="Shifts the chosen k by this many table rows (NIRVANA 5.3.1)."
    )

    predictor_enabled: bool = Field(
        False,
        description="Skip the vector search when the match predictor says miss (NIRVANA 5.2). Off by "
        "default: on the DiffusionDB trace it loses more compute (hits it skips) than it saves in "
        "lookups (README, 'match predictor'; `python -m bench.cache.predictor --trace`).",
    )
    predictor_nu: float | None = Field(
        None,
        gt=0,
        le=1,
        description="SGDOneClassSVM nu. Unset: chosen per fit on held-out data from "
        "0.001 (NIRVANA 6), 0.01, 0.1, 0.5 (jobs.policies.predictor.NU_GRID).",
    )
    predictor_audit_rate: float = Field(
        0.1, ge=0, le=1, description="Share of predicted misses searched anyway, to measure the recall."
    )
    predictor_retrain_change: float = Field(
        0.05, gt=0, le=1, description="Retrain when the cache changed by more than this (NIRVANA 5.2: 5%)."
    )
    predictor_retrain_inserts: int = Field(
        64,
        ge=0,
        description="Also retrain after this many inserts since the last fit (an insert burst; 0: off). "
        "Not from the papers: the 5% rule alone leaves a large cache's newest entries unknown to the "
        "predictor for long.",
    )

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
