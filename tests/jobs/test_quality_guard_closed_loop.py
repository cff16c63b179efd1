"""The quality guard in closed loop on measured drops: 600 requests drawn from the lab profile's pairs
(`lab/profiles/image-refine-small.json`: each pair's similarity, and its fresh and hit quality, measured
by `reprise profile k`), served from a deliberately loose table, half the hits audited, a guard pass
every 30 requests with the service's defaults. Within the 600 the guard brings the drop over all
requests within the target, and the cache still serves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from core.settings import load_settings
from jobs.passes.quality_guard import guard_config
from jobs.policies.k_selection import ThresholdTable, parse_table
from jobs.policies.quality_guard import Audit, adjust, estimate

PROFILE = Path(__file__).resolve().parents[2] / "lab" / "profiles" / "image-refine-small.json"
K = 25
LOOSE = parse_table(f"0.5:{K}")  # the profile's pairs from 0.5 to 0.85 lose 0.04 to 0.17 at k = 25


def _pairs() -> list[tuple[float, float]]:
    """(similarity, drop at k = K) of every profiled pair."""
    rows = json.loads(PROFILE.read_text())["measurements"]
    return [(float(row["similarity"]), float(row["fresh"]) - float(row["hits"][str(K)])) for row in rows]


def _serve(requests: int, seed: int, *, guarded: bool) -> tuple[list[float], list[bool], ThresholdTable]:
    """Each request's drop (0 for a miss) and whether it hit, and the table at the end."""
    pairs, config = _pairs(), guard_config(load_settings())
    rng = np.random.default_rng(seed)
    table, audits = LOOSE, list[Audit]()
    drops, hits = [], []
    for served in range(requests):
        similarity, drop = pairs[int(rng.integers(len(pairs)))]
        audited = rng.random() < 0.5
        hit = similarity > table.rows[0].similarity
        drops.append(drop if hit else 0.0)
        hits.append(hit)
        if hit and audited:
            audits.insert(0, Audit(similarity, K, drop))  # newest first, as the pass reads them
        if guarded and served % 30 == 29:
            table = adjust(table, LOOSE, estimate(audits), {K: K}, config).table
    return drops, hits, table


def test_the_guard_brings_a_loose_tables_drop_within_the_target_inside_600_requests() -> None:
    """A controller on samples holds the target in distribution: over 40 seeded runs the second 300
    requests stay within it in all but a few, and no run is left serving nothing."""
    target = load_settings().quality_drop_target
    runs = [(_serve(600, seed, guarded=False)[0], _serve(600, seed, guarded=True)) for seed in range(40)]
    assert all(np.mean(static[300:]) > target for static, _ in runs)  # the table is loose: unguarded, outside
    second_half = np.array([np.mean(drops[300:]) for _, (drops, _, _) in runs])
    assert np.mean(second_half <= target) >= 0.95, second_half
    assert np.mean(second_half) <= target / 2
    hit_rates = [np.mean(hits[300:]) for _, (_, hits, _) in runs]
    assert min(hit_rates) > 0 and np.mean(hit_rates) >= 0.15  # the exact matches and paraphrases are served
    ends = [table.rows[0].similarity for _, (_, _, table) in runs]
    assert np.mean([0.85 <= end <= 0.9 for end in ends]) >= 0.9  # past the one-attribute plateau (0.825)
