"""Quality in simulation: a hit's judge score predicted from a profile (`reprise profile k --json`).

The profile measured pairs (a query and a cached prompt, their similarity) and, per K, the judged
quality of the query's hit and of its fresh generation (bench.quality.profile). A simulated hit of
similarity s served at k is given the bin of pairs s falls in: their mean hit quality, compared with
their mean fresh quality, so that its drop is the drop those pairs measured against a fresh
generation of the same request, as a replay's audits measure it (the queries whose cached image
reads well are also easier to draw: above 0.7 their fresh generations judge 0.76 against 0.69 over
all pairs, and comparing a hit with the latter would credit the hit with the selection). The bins are
cut from the profile's pairs from the most similar down, MIN_LIVE_PAIRS pairs each (the support a row
of the k table needs; the curve's fixed bins hold 3 to 10 pairs above 0.8); a profile without its pairs
uses its curve's bins. The nearest profiled K serves a k that was not profiled. A miss is given the
profile's fresh quality. This holds only for prompts of the world the profile was measured on:
`is_lab_trace` checks that a trace is a lab trace.

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
# The same for text-to-image lookups in the lab's attribute space (lab.attribute_space).
SHIPPED_IMAGE: Final = {(HitPolicy.REFINE, True): "image-refine-small.json"}  # the lab's default: MoDM
MIN_LIVE_PAIRS: Final = 16
"""Audited hits a live bin needs to replace the profile's: the support a row of the offline table needs
(bench.quality.profile.MIN_SUPPORT), for the same reason: a hit's judged quality moves in steps of
1/6 or 1/9 (the attributes of one prompt), so a mean over fewer hits cannot tell a drop of 0.02 from
noise. (Offline bins may hold fewer: the profile bins every pair; this is why they are replaced.)"""


@dataclass(frozen=True, slots=True)
class ProfiledBin:
    """Pairs of similarity in [low, high) at one K: their mean hit and fresh quality."""

    low: float
    high: float
    hit: float
    fresh: float

    def holds(self, similarity: float) -> bool:
        return self.low <= similarity < self.high or (similarity >= 1.0 and self.high >= 1.0)


@dataclass(frozen=True, slots=True)
class QualityModel:
    fresh: float
    bins: dict[int, list[ProfiledBin]]  # k -> its bins, the most similar first
    source: str
    live: tuple[BinDrop, ...] = ()  # bins refitted from replays, each of at least MIN_LIVE_PAIRS hits

    @classmethod
    def from_profile(cls, path: Path) -> QualityModel:
        data: dict[str, Any] = json.loads(path.read_text())
        fresh = float(data["fresh_quality"])
        measured = data.get("measurements")
        bins = _supported_bins(measured) if measured else _curve_bins(data["curve"], fresh)
        models = data.get("models", {})
        source = (
            f"profile {path.name} ({models.get('large')} -> {models.get('hit')}, {data.get('hit_operation')})"
        )
        return cls(fresh=fresh, bins=bins, source=source)

    def refitted(self, measured: Sequence[BinDrop], origin: str) -> QualityModel:
        """This model with the live bins of `measured` that hold at least MIN_LIVE_PAIRS hits."""
        kept = tuple(row for row in measured if row.n >= MIN_LIVE_PAIRS)
        note = f"; refitted from {origin}: {len(kept)} of {len(measured)} live bins >= {MIN_LIVE_PAIRS} hits"
        return replace(self, live=kept, source=self.source + note)

    def hit(self, similarity: float, k: int) -> tuple[float, float]:
        """The predicted quality of a hit of `similarity` served at `k`, and that of the fresh
        generation it is compared with."""
        for row in self.live:
            if row.holds(similarity, k):
                return self.fresh - row.drop_mean, self.fresh
        k_near = min(self.bins, key=lambda profiled: (abs(profiled - k), -profiled))
        rows = self.bins[k_near]
        found = next((row for row in rows if row.holds(similarity)), None)
        if found is None:
            found = min(rows, key=lambda row: min(abs(similarity - row.low), abs(similarity - row.high)))
        return found.hit, found.fresh


def _supported_bins(measurements: Sequence[dict[str, Any]]) -> dict[int, list[ProfiledBin]]:
    """Per K, bins of MIN_LIVE_PAIRS pairs cut from the most similar pair down (fewer left at the bottom
    join the bin above), spanning 0 to 1."""
    pairs = sorted(measurements, key=lambda row: -float(row["similarity"]))
    chunks = [pairs[start : start + MIN_LIVE_PAIRS] for start in range(0, len(pairs), MIN_LIVE_PAIRS)]
    if len(chunks) > 1 and len(chunks[-1]) < MIN_LIVE_PAIRS:
        tail = chunks.pop()
        chunks[-1] = chunks[-1] + tail
    ks = sorted({int(k) for row in pairs for k in row["hits"]})
    bins: dict[int, list[ProfiledBin]] = {k: [] for k in ks}
    high = 1.0
    for position, chunk in enumerate(chunks):
        low = 0.0 if position == len(chunks) - 1 else float(chunk[-1]["similarity"])
        fresh = sum(float(row["fresh"]) for row in chunk) / len(chunk)
        for k in ks:
            hit = sum(float(row["hits"][str(k)]) for row in chunk) / len(chunk)
            bins[k].append(ProfiledBin(low, high, hit, fresh))
        high = low
    return bins


def _curve_bins(curve: Sequence[dict[str, Any]], fresh: float) -> dict[int, list[ProfiledBin]]:
    """The curve's bins, each compared with its own pairs' fresh quality (hit quality + drop)."""
    bins: dict[int, list[ProfiledBin]] = {}
    for point in curve:
        hit = float(point["hit_quality"])
        own = (
            float(point["fresh_quality"])
            if "fresh_quality" in point
            else hit + float(point.get("drop", fresh - hit))
        )
        bins.setdefault(int(point["k"]), []).append(
            ProfiledBin(float(point["similarity_low"]), float(point["similarity_high"]), hit, own)
        )
    return bins


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
        quality, fresh = model.fresh, model.fresh
        if outcome.hit and outcome.similarity is not None and outcome.k is not None:
            quality, fresh = model.hit(outcome.similarity, outcome.k)
        judged.append(replace(outcome, quality=quality, fresh_quality=fresh))
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
