"""Quality guard: the online controller that holds the drop a cache hit costs in judged quality to a
target, by auditing a share of hits against fresh generations and moving the k table's thresholds
(jobs/policies/quality_guard.py). NIRVANA profiles its table once, offline (Algorithm 1); the guard
keeps measuring it while serving."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class QualitySettings(BaseSettings):
    """Quality guard: the target, the share of hits audited, and the controller's sample and hysteresis.

    An audit generates the hit's request again from scratch on the large pool, ahead of its queues (same
    prompt, seed and steps, cache off, nothing stored), scores both images with the configured scorer
    and records the drop; a beat pass estimates the drop per (similarity bin, k) and raises or lowers
    the table's thresholds to hold the target.
    """

    quality_guard: bool = Field(
        True,
        description="Audit hits and move the k table's thresholds online to hold quality_drop_target. On by "
        "default: on the live default stack (docs/results/step-cache.md#the-quality-guard-on-the-live-stack) "
        "it served 6.70 requests/s against 6.37 with it off on the same unseen trace (no loss within the "
        "spread between runs), its 11 audits taking 5.4% of the stack's CPU; an audit is one more full "
        "generation on the large pool. With it on the table only ever moves between the configured "
        "thresholds and stricter ones; off, the configured k table (REPRISE_K_TABLE) is used exactly as "
        "configured.",
    )
    quality_drop_target: float = Field(
        0.02,
        ge=0.0,
        le=1.0,
        description="The mean quality drop (fresh generation's score minus the hit's, the configured "
        "scorer's 0-1 scale) the guard holds per (similarity bin, k). 0.02: NIRVANA's quality tolerance "
        "(Eq. 10 and 5.3.1: a hit keeps the quality of a fresh image within the profiled tolerance), "
        "the tolerance `reprise profile k` profiles the lab's tables with by default.",
    )
    quality_audit_fraction: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="Share of completed hits audited against a fresh generation (guard on). 0.1, the "
        "share of predicted misses the match predictor's audit searches (predictor_audit_rate): at a hit "
        "rate near 0.3 it costs about 3% more full generations, the large pool's audit queue taken first, "
        "and a bin collects quality_guard_min_sample audits after about ten times as many hits in it.",
    )
    quality_audit_max_age_s: float = Field(
        120.0,
        gt=0,
        description="An audit still queued this long after its hit completed is dropped unrun. Taken first "
        "on the large pool, audits would otherwise pile up ahead of the misses when hits outrun them "
        "(measured: at REPRISE_QUALITY_AUDIT_FRACTION=0.5 a miss waited 248 s behind them); 120 s is "
        "four guard passes (the beat's 30 s period), past which the table the hit was served from has "
        "likely moved.",
    )
    quality_guard_min_sample: int = Field(
        16,
        ge=1,
        description="Audits a (similarity bin, k) needs before the guard acts on its estimate. 16: the "
        "lab judge scores a fraction of attributes, so one hit's drop varies by about 0.2; the mean of "
        "16 has a standard error near 0.05, which tells the drops the guard exists for (0.2 over hits "
        "measured live on the default lab configuration) from the target by more than 3 errors.",
    )
    quality_guard_hysteresis: float = Field(
        0.01,
        ge=0.0,
        le=1.0,
        description="A tightened threshold is lowered again only while the estimate is below "
        "quality_drop_target minus this. 0.01, half the default target: a bin whose drop sits at the "
        "target does not move the threshold up and down with every sample.",
    )
    quality_guard_cache_s: float = Field(
        10.0,
        gt=0.0,
        description="How long an admit process keeps the guarded table before reading it again. 10 s: a "
        "third of the beat period (30 s) that changes it, one query per admit process per 10 s.",
    )
