"""How the simulator looks a trace's prompts up: as the stack does, whatever the trace.

With the embedder and lookup mode the replay recorded (its `embedder`) under --compare, else the
configured ones; on the lab's default (image lookups in the lab's attribute space) a prompt outside the
lab's world gets the stack's vector for it, which matches no cached image (bench.workload.lab_space).
Where no image can be embedded, the configured text embedder stands in and the report says so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.live.stack import read_comparison
from bench.quality.model import QualityModel, is_lab_trace, shipped_profile
from bench.run.options import SimulateOptions
from bench.run.profiles import Profile
from bench.sim.lookup import simulated_table
from bench.workload.embeddings import TraceEmbeddings, configured_embedder, trace_embeddings
from bench.workload.trace import Workload
from core.errors import ThresholdTableError
from core.settings import Settings
from core.vocabulary import LAB_ATTRIBUTES, MINILM_KINDS, HitPolicy, LookupMode


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


RECORDED = "the replay's embedder record"


def stack_lookup(
    settings: Settings, profiles: Sequence[Profile], record: Mapping[str, Any] | None
) -> tuple[str | None, bool, str]:
    """The embedder the stack looked prompts up with, whether its lookups were text-to-image, and
    whence: the replay's `embedder` record where there is one (its name and lookup), else this
    process's settings and the caching profiles' lookup mode."""
    caching = [profile for profile in profiles if profile.caches]
    images = bool(caching) and all(profile.lookup is LookupMode.TEXT_TO_IMAGE for profile in caching)
    if record and record.get("name"):
        lookup = str(record.get("lookup") or "")
        images = lookup.startswith("text-to-image") if lookup else images
        name = str(record["name"])
        if not (images and name in {kind.value for kind in MINILM_KINDS} | {"minilm"}):
            return name, images, RECORDED
        # A replay from before the stack reported its lookup names the replay process's text embedder
        # (bench.live.stack.StackWatch.embedder), which embeds no image: the image side is the settings'.
        return settings.open_clip_model, images, "the configured settings (the replay names a text embedder)"
    return settings.open_clip_model if images else None, images, "the configured settings"


def _outside_lab_space(profiles: Sequence[Profile], k_table: str | None) -> list[str]:
    """The caching profiles whose threshold table cannot serve lookups in the lab's attribute space
    (a paper's CLIP-scale table, e.g. MoDM's modm-t2i: jobs.policies.k_selection refuses it there), each
    with the reason."""
    refused = []
    for profile in (p for p in profiles if p.caches):
        try:
            simulated_table(profile, k_table, lab_space=True)
        except ThresholdTableError as error:
            refused.append(f"profile {profile.name}: {error}")
    return refused


def stack_embeddings(
    settings: Settings,
    workload: Workload,
    profiles: Sequence[Profile],
    quality_profile: Path | None,
    record: Mapping[str, Any] | None = None,
    k_table: str | None = None,
) -> TraceEmbeddings:
    """The trace's vectors, as the stack would look its prompts up (`stack_lookup`): in the lab's
    attribute space when the stack looked images up there (the lab's default), whatever the trace, each
    image read as the profile the quality model reads (`quality_profile`, else the shipped one) read its
    images (bench.workload.lab_space; a prompt outside the lab's world matches no image there), else the
    configured text embedder's."""
    name, images, whence = stack_lookup(settings, profiles, record)
    lab_space = images and name is not None and name.split(" ")[0] == LAB_ATTRIBUTES
    refused = _outside_lab_space(profiles, k_table) if lab_space else []
    if refused:
        _note(
            "image lookups in the lab's attribute space, but "
            + "; ".join(refused)
            + ": the stack would refuse it there, so text-to-text stands in (one set of vectors serves "
            "every profile of the run)"
        )
    if lab_space and not refused:
        from bench.workload.lab_space import lab_space_embeddings, readings_of

        profiled = quality_profile or shipped_profile(HitPolicy.REFINE, True, LookupMode.TEXT_TO_IMAGE)
        shown, readings = QualityModel.from_profile(profiled).fresh, readings_of(profiled)
        read = f"as asked at {shown:.3f}"
        if readings:
            read = f"as one of the {len(readings)} readings of {profiled.name}"
        lines = list(workload.prompts.lines)
        world = "lab trace" if is_lab_trace(lines) else "a trace with prompts outside the lab's world"
        _note(
            f"{world}, image lookups ({whence}): the lab's attribute space, each image read {read}"
            + ("" if world == "lab trace" else "; a prompt outside the world matches no cached image")
        )
        indices = [r.prompt_idx for r in workload.requests]
        return lab_space_embeddings(
            workload.prompts, indices, shown=shown, dim=settings.image_embedding_dim, readings=readings
        )
    embedder = configured_embedder(settings)
    recorded = whence == RECORDED
    if recorded and not images and name is not None and name.split(":")[0] != embedder.name:
        raise ValueError(
            f"--compare: the replay's stack looked prompts up with {name}, this process's settings embed "
            f"with {embedder.name}: run the simulation with the stack's embedder settings"
        )
    if images:
        _note(
            f"image lookups with {name} ({whence}): no images in simulation, so text-to-text with "
            f"{embedder.name} stands in (the report's embedder says so)"
        )
    cache_dir = settings.data_dir / "bench" / "embeddings"
    _note(f"embedding {len(workload.requests)} prompts with {embedder.name} (cached in {cache_dir})")
    return trace_embeddings(
        workload.prompts, [r.prompt_idx for r in workload.requests], embedder, cache_dir=cache_dir
    )


def replayed_embedder(options: SimulateOptions, profiles: Sequence[Profile]) -> dict[str, Any] | None:
    """With --compare: the `embedder` record of the replay of the caching profiles (the first that has
    one; a replay's processes share one stack, so one embedder)."""
    if options.compare is None:
        return None
    measured = read_comparison(options.compare)
    for profile in (p for p in profiles if p.caches):
        match = next((m for m in measured if m.get("profile") == profile.name), None)
        if match is not None and match.get("embedder"):
            return dict(match["embedder"])
    return None
