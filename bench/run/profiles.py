"""Benchmark profiles: which caching design a run measures.

vanilla     no cache: every request runs the large model for all T steps (the baseline of
            NIRVANA 7 and MoDM 6)
nirvana     intermediate latents at K (NIRVANA 5.3), text-to-text lookup (5.1), resume on the
            large model (NIRVANA serves one model; a latent resumes only in its own family),
            LCBFU eviction (5.4), match predictor (5.2) unless REPRISE_PREDICTOR_ENABLED is set
            (then as it says: the setting is honoured where it is given; the report's `profile`
            name says nirvana either way, `nirvana-womp` names the run without it)
nirvana-womp  nirvana without its match predictor (the paper's NIRVANA-w/oMP baseline, 7)
modm        final latents, text-to-image lookup (MoDM 5.2), refine hits on the small model,
            FIFO eviction and caching the results of hits too (5.4), no match predictor
diffserve   DiffServe (its 3.1): no cache; every request runs light-first, the discriminator escalates the
            rest to the heavy model (bench.sim.cascade); the threshold and the split from the MILP
reprise     the configured cache with DiffServe's cascade for its misses: hits to the small (light) pool,
            misses into the cascade (README, "DiffServe's cascade")
configured  whatever the settings say (REPRISE_LOOKUP_MODE, _HIT_POLICY, _K_TABLE, ...): a mix.
            Its hits go where the stack sends them: the small pool (cache_hit) for a refine, or a
            resume when the small model shares the large one's family; the large pool otherwise
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from core.settings import Settings
from core.vocabulary import EvictionPolicyName, HitPolicy, LookupMode
from jobs.policies.k_selection import configured_table
from jobs.queues import settings_hits_need_large


class ProfileName(StrEnum):
    VANILLA = "vanilla"
    NIRVANA = "nirvana"
    NIRVANA_WOMP = "nirvana-womp"
    MODM = "modm"
    CONFIGURED = "configured"
    DIFFSERVE = "diffserve"
    REPRISE = "reprise"


@dataclass(frozen=True, slots=True)
class Profile:
    """One caching design. `caches` is False for vanilla (nothing is looked up or stored)."""

    name: str
    caches: bool
    lookup: LookupMode
    hit_policy: HitPolicy
    k_table: str
    quality_knob: int
    eviction: EvictionPolicyName
    cache_all: bool
    predictor: bool
    steps: int
    capture_steps: tuple[int, ...]
    hits_on_small: bool  # hits run on the small pool (and on large workers only when no miss waits)
    cascade: bool = False  # misses go light-first through DiffServe's discriminator

    @property
    def cached_ks(self) -> tuple[int, ...] | None:
        """The k states an entry stores: the captured K (resume), or None: a final latent serves any k."""
        return self.capture_steps if self.hit_policy is HitPolicy.RESUME else None

    def with_eviction(self, policy: EvictionPolicyName) -> Profile:
        return replace(self, eviction=policy)

    def settings_overrides(self) -> dict[str, Any]:
        """The settings a stack needs to serve this profile (for checking a replay's target)."""
        return {
            "lookup_mode": self.lookup,
            "hit_policy": self.hit_policy,
            "k_table": self.k_table,
            "eviction_policy": self.eviction,
            "cache_all": self.cache_all,
            "predictor_enabled": self.predictor,
        }

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "caches": self.caches,
            "lookup": self.lookup.value,
            "hit_policy": self.hit_policy.value,
            "k_table": self.k_table,
            "quality_knob": self.quality_knob,
            "eviction": self.eviction.value,
            "cache_all": self.cache_all,
            "predictor": self.predictor,
            "steps": self.steps,
            "capture_steps": list(self.capture_steps),
            "hits_on_small": self.hits_on_small,
            "cascade": self.cascade,
        }


def build_profile(name: str, settings: Settings) -> Profile:
    """The named profile; T, the captured K and the knob come from settings for every profile."""
    try:
        kind = ProfileName(name)
    except ValueError:
        raise ValueError(
            f"unknown profile {name!r}: choose {', '.join(p.value for p in ProfileName)}"
        ) from None
    base = Profile(
        name=kind.value,
        caches=True,
        lookup=settings.lookup_mode,
        hit_policy=settings.hit_policy,
        k_table=configured_table(settings).name,  # "auto" read for the lookup mode
        quality_knob=settings.quality_knob,
        eviction=settings.eviction_policy,
        cache_all=settings.cache_all,
        predictor=settings.predictor_enabled,
        steps=settings.steps,
        capture_steps=tuple(settings.capture_steps),
        hits_on_small=not settings_hits_need_large(settings),  # the live route (jobs.queues.hit_task)
    )
    if kind is ProfileName.VANILLA:
        return replace(base, caches=False, cache_all=False, predictor=False, hits_on_small=False)
    if kind is ProfileName.DIFFSERVE:
        return replace(
            base, caches=False, cache_all=False, predictor=False, hits_on_small=False, cascade=True
        )
    if kind is ProfileName.REPRISE:
        return replace(base, cascade=True)
    if kind in (ProfileName.NIRVANA, ProfileName.NIRVANA_WOMP):
        return replace(
            base,
            lookup=LookupMode.TEXT_TO_TEXT,
            hit_policy=HitPolicy.RESUME,
            k_table="nirvana-t2t",
            eviction=EvictionPolicyName.LCBFU,
            cache_all=False,
            predictor=_nirvana_predictor(kind, settings),
            hits_on_small=False,
        )
    if kind is ProfileName.MODM:
        return replace(
            base,
            lookup=LookupMode.TEXT_TO_IMAGE,
            hit_policy=HitPolicy.REFINE,
            k_table="modm-t2i",
            eviction=EvictionPolicyName.FIFO,
            cache_all=True,
            predictor=False,
            hits_on_small=True,
        )
    return base


def _nirvana_predictor(kind: ProfileName, settings: Settings) -> bool:
    """NIRVANA runs its match predictor (5.2) and NIRVANA-w/oMP does not (7); an explicit
    REPRISE_PREDICTOR_ENABLED (a field set, not the default) overrides nirvana's."""
    if kind is ProfileName.NIRVANA_WOMP:
        return False
    return settings.predictor_enabled if "predictor_enabled" in settings.model_fields_set else True


def settings_mismatches(profile: Profile, settings: Settings) -> list[str]:
    """Settings that differ from what `profile` needs, as 'name: configured != wanted' lines."""
    if not profile.caches:
        return []
    lines = []
    for field, wanted in profile.settings_overrides().items():
        configured = getattr(settings, field)
        if field == "k_table":  # "auto" and the preset it reads as are the same table
            configured = configured_table(settings).name
        if configured != wanted:
            lines.append(f"{field}: configured {configured!s} != {profile.name} wants {wanted!s}")
    return lines
