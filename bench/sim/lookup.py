"""How a simulated run looks prompts up: its cache (bench.sim.cache), the threshold table, and what the
report says about both.

Text-to-image lookup (MoDM) needs images, which are not generated in simulation. In the quality lab's
attribute space their readings are drawn (bench.workload.lab_space: the embeddings carry `keys`) and the
lookup is text-to-image with the profile's own table; elsewhere every profile looks up text to text,
with the profile's table when it is a text-to-text one and `STANDIN_TABLE` otherwise (override with
k_table). The report's `embedder` says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.run.costs import StepCosts
from bench.run.profiles import Profile
from bench.sim.cache import SimCache
from bench.workload.embeddings import TraceEmbeddings
from core.settings import Settings
from core.vocabulary import LAB_ATTRIBUTES, LookupMode
from jobs.policies.k_selection import PRESETS, ThresholdTable, parse_table, table_for

STANDIN_TABLE = "nirvana-t2t"
"""The table used when the profile's lookup is text-to-image (see the module docstring)."""


def simulated_table(
    profile: Profile, override: str | None, *, lab_space: bool = False
) -> tuple[ThresholdTable, str]:
    """The threshold table the simulated lookup uses, and how it was chosen; `lab_space`: the lookup is
    text-to-image in the lab's attribute space (bench.workload.lab_space)."""
    if override is not None:
        return parse_table(override), "configured for the simulation"
    if lab_space:
        table = table_for(profile.k_table, LookupMode.TEXT_TO_IMAGE, space=LAB_ATTRIBUTES, lab=True)
        return table, "the profile's, in the lab's attribute space"
    if profile.lookup is LookupMode.TEXT_TO_TEXT:
        return table_for(profile.k_table, LookupMode.TEXT_TO_TEXT), "the profile's"
    return PRESETS[STANDIN_TABLE], f"stand-in for the profile's text-to-image {profile.k_table}"


def final_latent_k(profile: Profile, table: ThresholdTable, settings: Settings) -> int:
    """What a state-less entry is worth to eviction: the service's own rule (jobs.passes.eviction)."""
    from jobs.passes.eviction import final_latent_k as service_rule

    return service_rule(
        settings.model_copy(update={"hit_policy": profile.hit_policy, "k_table": table.describe()})
    )


@dataclass(frozen=True, slots=True)
class SimulatedLookup:
    """How a run looks prompts up: its simulated cache (None when the profile caches nothing), the
    threshold table it uses and the report's `embedder`."""

    cache: SimCache | None
    table: str | None
    embedder: dict[str, object]


def simulated_lookup(
    profile: Profile,
    *,
    k_table: str | None,
    costs: StepCosts,
    cache_bytes: int,
    capacity: int,
    settings: Settings,
    embeddings: TraceEmbeddings | None,
    prompts: Sequence[str] | None = None,
) -> SimulatedLookup:
    """The lookup of a run of `profile` with a cache of `cache_bytes` holding up to `capacity` entries;
    `prompts` (the trace's lines, by query row) let an identical request find its entry as admission's
    prompt key does."""
    if not profile.caches:
        return SimulatedLookup(
            cache=None, table=None, embedder={"name": None, "lookup": "none (nothing is cached)"}
        )
    if embeddings is None:
        raise ValueError(f"profile {profile.name} looks prompts up: pass the trace's embeddings")
    lab_space = embeddings.keys is not None
    table, how = simulated_table(profile, k_table, lab_space=lab_space)
    table_text = table.describe()
    cache = SimCache(
        queries=embeddings.vectors,
        capacity=max(1, capacity),
        table=table,
        knob=profile.quality_knob,
        hit_policy=profile.hit_policy,
        steps=profile.steps,
        budget_bytes=cache_bytes,
        policy=profile.eviction,
        cached_ks=profile.cached_ks,
        state_bytes=costs.state_bytes,
        use_predictor=profile.predictor,
        final_latent_k=final_latent_k(profile, table, settings),
        retrain_change=settings.predictor_retrain_change,
        retrain_inserts=settings.predictor_retrain_inserts,
        keys=embeddings.keys,
        prompts=prompts,
    )
    if lab_space:
        lookup = str(embeddings.describe["lookup"])
    elif profile.lookup is LookupMode.TEXT_TO_TEXT:
        lookup = "text-to-text"
    else:
        lookup = "text-to-text, standing in for text-to-image (no images are generated in simulation)"
    embedder = {**embeddings.describe, "lookup": lookup, "k_table": f"{table_text} ({how})"}
    return SimulatedLookup(cache=cache, table=table_text, embedder=embedder)
