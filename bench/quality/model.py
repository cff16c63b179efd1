"""Quality in simulation: a hit's judge score predicted from a profile (`reprise profile k --json`).

The profile measured, per K and similarity bin, the mean quality of hits and of fresh generations
on the lab's models (bench.quality.profile.curve). A simulated hit of similarity s served at k is
given that bin's hit quality (the nearest profiled bin of that k when s falls in none, the nearest
profiled K when k was not profiled); a miss, and the fresh generation every request is compared
with, the profile's fresh quality. This holds only for prompts of the world the profile was
measured on: `is_lab_trace` checks that a trace is a lab trace.

Refitted from live replays (`bench simulate --quality-from replay.json`): a replay's JSON holds its
audited hits' mean drop per (similarity bin, k) (quality.by_bin, bench.quality.drops); a bin with at
least MIN_LIVE_PAIRS audited hits predicts its hits' drop from them (hit quality = fresh - live
drop), every other hit falls back to the offline profile.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from bench.quality.drops import BinDrop
from core.vocabulary import HitPolicy, LookupMode

PROFILES_DIR: Final = Path(__file__).resolve().parents[2] / "lab" / "profiles"
# The shipped profiles (`reprise profile k`, commands in the README), by hit operation and hit model.
SHIPPED: Final = {
    (HitPolicy.RESUME, True): "resume-small.json",  # the service's default: hits resume on the small model
    (HitPolicy.RESUME, False): "resume-large.json",  # NIRVANA: hits resume on the large model
    (HitPolicy.REFINE, True): "refine-small.json",  # MoDM: hits refine on the small model
    (HitPolicy.REFINE, False): "refine-large.json",
}
# The same for text-to-image lookups in the lab's attribute space (workers.runtime.embedders.lab_attributes).
SHIPPED_IMAGE: Final = {(HitPolicy.REFINE, True): "image-refine-small.json"}  # the lab's default: MoDM
MIN_LIVE_PAIRS: Final = 16
"""Audited hits a live bin needs to replace the profile's: the support a row of the offline table needs
(bench.quality.profile.MIN_SUPPORT), for the same reason: a hit's judged quality moves in steps of
1/6 or 1/9 (the attributes of one prompt), so a mean over fewer hits cannot tell a drop of 0.02 from
noise. (Offline bins may hold fewer: the profile bins every pair; this is why they are replaced.)"""


@dataclass(frozen=True, slots=True)
class QualityModel:
    fresh: float
    bins: dict[int, list[tuple[float, float, float]]]  # k -> [(low, high, hit quality)]
    source: str
    live: tuple[BinDrop, ...] = ()  # bins refitted from replays, each of at least MIN_LIVE_PAIRS hits

    @classmethod
    def from_profile(cls, path: Path) -> QualityModel:
        data: dict[str, Any] = json.loads(path.read_text())
        bins: dict[int, list[tuple[float, float, float]]] = {}
        for point in data["curve"]:
            bins.setdefault(int(point["k"]), []).append(
                (float(point["similarity_low"]), float(point["similarity_high"]), float(point["hit_quality"]))
            )
        models = data.get("models", {})
        source = (
            f"profile {path.name} ({models.get('large')} -> {models.get('hit')}, {data.get('hit_operation')})"
        )
        return cls(fresh=float(data["fresh_quality"]), bins=bins, source=source)

    def refitted(self, measured: Sequence[BinDrop], origin: str) -> QualityModel:
        """This model with the live bins of `measured` that hold at least MIN_LIVE_PAIRS hits."""
        kept = tuple(row for row in measured if row.n >= MIN_LIVE_PAIRS)
        note = f"; refitted from {origin}: {len(kept)} of {len(measured)} live bins >= {MIN_LIVE_PAIRS} hits"
        return replace(self, live=kept, source=self.source + note)

    def hit(self, similarity: float, k: int) -> float:
        """The predicted quality of a hit of `similarity` served at `k`."""
        for row in self.live:
            if row.holds(similarity, k):
                return self.fresh - row.drop_mean
        k_near = min(self.bins, key=lambda profiled: (abs(profiled - k), -profiled))
        rows = self.bins[k_near]
        for low, high, quality in rows:
            if low <= similarity < high or (similarity >= 1.0 and high >= 1.0):
                return quality
        return min(rows, key=lambda row: min(abs(similarity - row[0]), abs(similarity - row[1])))[2]


def shipped_profile(
    hit_policy: HitPolicy, hits_on_small: bool, lookup: LookupMode = LookupMode.TEXT_TO_TEXT
) -> Path:
    """The shipped profile of a route: image lookups' own where one was profiled, else the text one's."""
    image = SHIPPED_IMAGE.get((hit_policy, hits_on_small)) if lookup is LookupMode.TEXT_TO_IMAGE else None
    return PROFILES_DIR / (image or SHIPPED[(hit_policy, hits_on_small)])


def is_lab_trace(prompts: list[str]) -> bool:
    """Whether every prompt is of the lab's world (so the lab's profiles predict its quality)."""
    from lab.captions import parse

    return bool(prompts) and all(parse(prompt) is not None for prompt in prompts)


def simulated_quality(
    outcomes: list[Any],
    *,
    prompts: list[str],
    hit_policy: HitPolicy,
    small_name: str,
    override: Path | None,
    live: Path | None = None,
    lookup: LookupMode = LookupMode.TEXT_TO_TEXT,
) -> tuple[list[Any], str | None]:
    """Outcomes with quality and fresh_quality set from a profile (`override`, or the shipped one for
    the hit operation and the model each hit ran on), refitted from a replay's JSON `live` where it
    has enough audited hits; unchanged, with source None, for a trace that is not of the lab's world
    (no profile can predict its quality)."""
    if override is None and not is_lab_trace(prompts):
        return outcomes, None
    models: dict[bool, QualityModel] = {}
    for on_small in (True, False):
        path = override if override is not None else shipped_profile(hit_policy, on_small, lookup)
        if path.is_file():
            models[on_small] = QualityModel.from_profile(path)
    if live is not None:
        measured = live_drops(live)
        models = {on_small: model.refitted(measured, live.name) for on_small, model in models.items()}
    if not models:
        return outcomes, None
    judged = []
    for outcome in outcomes:
        if outcome.quality is not None:  # set by who simulated it (a cascade: bench.sim.cascade)
            judged.append(outcome)
            continue
        on_small = small_name in outcome.denoiser_evaluations
        model = models.get(on_small) or next(iter(models.values()))
        quality = model.fresh
        if outcome.hit and outcome.similarity is not None and outcome.k is not None:
            quality = model.hit(outcome.similarity, outcome.k)
        judged.append(replace(outcome, quality=quality, fresh_quality=model.fresh))
    sources = sorted({model.source for model in models.values()})
    return judged, "simulated from " + "; ".join(sources)


def live_drops(path: Path) -> list[BinDrop]:
    """The by-bin drops of a replay's JSON (`bench replay --json`: one report, or a list whose reports'
    bins are pooled, weighted by their hits). ValueError when it holds none."""
    data: Any = json.loads(path.read_text())
    reports = data if isinstance(data, list) else [data]
    pooled: dict[tuple[float, float, int], tuple[int, float]] = {}
    for report in reports:
        for row in (report.get("quality") or {}).get("by_bin") or []:
            bin_drop = BinDrop.from_json(row)
            if bin_drop.n <= 0:
                continue
            key = (bin_drop.similarity_lo, bin_drop.similarity_hi, bin_drop.k)
            count, total = pooled.get(key, (0, 0.0))
            pooled[key] = (count + bin_drop.n, total + bin_drop.n * bin_drop.drop_mean)
    if not pooled:
        raise ValueError(f"{path} holds no quality.by_bin: replay with --quality-sample to audit hits")
    return [
        BinDrop(similarity_lo=lo, similarity_hi=hi, k=k, n=n, drop_mean=total / n)
        for (lo, hi, k), (n, total) in sorted(pooled.items(), key=lambda item: (item[0][2], item[0][0]))
    ]
