"""Checks of a whole configuration at start, beyond what each setting checks alone: combinations that
cannot work are refused (SettingsError naming the variables and the fix), doubtful ones are warnings.

`reprise` runs them before any command (reprise/cli.py); the warnings are printed by the commands that
serve (api, worker, run).
"""

from __future__ import annotations

from dataclasses import replace

from core.errors import SettingsError, ThresholdTableError
from core.schedulers import DIFFUSERS_CLASS, resume_refusal
from core.settings import Settings
from core.vocabulary import HitPolicy
from jobs.policies.k_selection import configured_table, embedder_mismatch, embedder_tag
from jobs.queues import settings_hits_need_large


def check_configuration(settings: Settings) -> list[str]:
    """Raise SettingsError for a configuration that cannot work; return warnings for doubtful ones."""
    errors: list[str] = []
    warnings: list[str] = []
    for check in (_threshold_table, _scheduler, _hit_routing):
        problem, warning = check(settings)
        if problem is not None:
            errors.append(problem)
        if warning is not None:
            warnings.append(warning)
    if errors:
        raise SettingsError("Invalid Reprise configuration:\n" + "\n".join(f"  {e}" for e in errors))
    return warnings


def _threshold_table(settings: Settings) -> tuple[str | None, str | None]:
    """The k table must suit the lookup mode (refused otherwise) and should have been profiled with the
    embedder in use (a warning otherwise)."""
    try:
        table = configured_table(settings)
    except ThresholdTableError as error:
        return f"REPRISE_K_TABLE={settings.k_table!r}: {error}", None
    profiled = table.profiled_with or settings.k_table_profiled_with  # presets say; custom tables may
    in_use = embedder_tag(settings.text_embedder, settings.open_clip_model, settings.lookup_mode)
    return None, embedder_mismatch(replace(table, profiled_with=profiled), in_use)


def _scheduler(settings: Settings) -> tuple[str | None, str | None]:
    """Under NIRVANA's resume, the scheduler must resume a cached latent exactly."""
    class_name = DIFFUSERS_CLASS[settings.scheduler]
    if settings.hit_policy is not HitPolicy.RESUME or class_name is None:
        return None, None  # `pipeline`: checked when the model loads (workers/runtime/hosting.py)
    refusal = resume_refusal(class_name)
    return (f"REPRISE_SCHEDULER={settings.scheduler.value}: {refusal}" if refusal else None), None


def _hit_routing(settings: Settings) -> tuple[str | None, str | None]:
    """Every hit must reach a worker that can serve it (jobs.queues.hit_task): under resume with a
    small model of another latent family, only large workers can, so they must take hits (refused
    otherwise), and the small pool has no work (a warning when the monitor must keep small workers)."""
    if not settings_hits_need_large(settings):
        return None, None
    families = (
        f"REPRISE_HIT_POLICY=resume with REPRISE_SMALL_FAMILY={settings.small_family!r} != "
        f"REPRISE_LARGE_FAMILY={settings.large_family!r}"
    )
    if not settings.large_serves_hits:
        return (
            f"{families}: a resume continues a cached latent of the large family, which the small model "
            "cannot denoise, and REPRISE_LARGE_SERVES_HITS=false keeps large workers off hits, so no "
            "worker could ever serve a hit. Fix: set REPRISE_LARGE_SERVES_HITS=true (hits run on the "
            "large pool), or use a small model of the large model's family, or REPRISE_HIT_POLICY=refine "
            "(any model refines a final latent)."
        ), None
    if settings.monitor_min_small > 0:
        return None, (
            f"{families}: every hit runs on the large pool (cache_hit_large), so the "
            f"REPRISE_MONITOR_MIN_SMALL={settings.monitor_min_small} small workers get no work. Fix: "
            "REPRISE_MONITOR_MIN_SMALL=0, or a small model of the large model's family."
        )
    return None, None
