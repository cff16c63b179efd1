"""Quality in the benchmarks: the profiler's table logic, the simulator's quality model, the summary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.quality.model import MIN_LIVE_PAIRS, QualityModel, is_lab_trace, simulated_quality
from bench.quality.profile import MIN_SUPPORT, Measured, Pair, curve, min_similarity, table_rows
from bench.run.outcomes import RequestOutcome, summarize_quality
from core.vocabulary import HitPolicy
from jobs.policies.k_selection import Comparison, parse_table


def _measured(similarity: list[float], fresh: list[float], hits: dict[int, list[float]]) -> Measured:
    pairs = [Pair(f"q{i}", f"c{i}", s, "test") for i, s in enumerate(similarity)]
    return Measured(pairs, np.array(fresh), {k: np.array(v) for k, v in hits.items()})


def test_min_similarity_is_where_the_running_mean_drop_first_exceeds_the_tolerance() -> None:
    similarity = np.linspace(1.0, 0.0, 40)
    drop = np.where(similarity > 0.5, 0.0, 0.5)  # hits above 0.5 are as good as fresh, below much worse
    found = min_similarity(similarity, drop, tolerance=0.02)
    assert found is not None and 0.45 < found <= 0.55
    assert min_similarity(similarity, np.full(40, 0.5), tolerance=0.02) is None  # never holds


def test_a_row_needs_enough_pairs_to_stand_on() -> None:
    similarity = np.linspace(1.0, 0.0, 40)
    drop = np.ones(40)
    drop[: MIN_SUPPORT - 1] = 0.0  # only the top few pairs hold: not enough support
    assert min_similarity(similarity, drop, tolerance=0.02) is None


def test_table_rows_give_larger_k_only_to_higher_similarity_and_parse_as_a_table() -> None:
    similarity = list(np.linspace(0.99, 0.3, 60))
    fresh = [1.0] * 60
    # k=5 holds down to 0.6, k=10 down to 0.8, k=15 down to 0.7 (noisy): k=15 must not be below k=10
    hits = {
        5: [1.0 if s > 0.6 else 0.5 for s in similarity],
        10: [1.0 if s > 0.8 else 0.5 for s in similarity],
        15: [1.0 if s > 0.7 else 0.5 for s in similarity],
        25: [0.5] * 60,  # never holds: left out
    }
    rows = table_rows(_measured(similarity, fresh, hits), tolerance=0.02)
    ks = [row["k"] for row in rows]
    assert ks == [15, 10, 5]
    sims = [row["min_similarity"] for row in rows]
    assert sims == sorted(sims, reverse=True) and len(set(sims)) == 3
    table = parse_table(",".join(f"{row['min_similarity']}:{row['k']}" for row in rows))
    assert table.comparison is Comparison.GREATER and table.ks == (15, 10, 5)


def test_the_curve_bins_drops_by_k_and_similarity() -> None:
    measured = _measured([0.95, 0.96, 0.5], [1.0, 1.0, 0.8], {5: [0.9, 0.7, 0.8]})
    points = {(p["k"], p["similarity_low"]): p for p in curve(measured)}
    assert points[(5, 0.95)]["pairs"] == 2 and points[(5, 0.95)]["drop"] == pytest.approx(0.2)
    assert points[(5, 0.0)]["drop"] == pytest.approx(0.0)


def _profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "profile.json"
    path.write_text(
        json.dumps(
            {
                "fresh_quality": 0.9,
                "models": {"large": "lab:large", "hit": "lab:small"},
                "hit_operation": "resume",
                "curve": [
                    {
                        "k": 5,
                        "similarity_low": 0.9,
                        "similarity_high": 1.0,
                        "hit_quality": 0.88,
                        "drop": 0.02,
                    },
                    {"k": 5, "similarity_low": 0.7, "similarity_high": 0.9, "hit_quality": 0.6, "drop": 0.3},
                    {"k": 25, "similarity_low": 0.9, "similarity_high": 1.0, "hit_quality": 0.5, "drop": 0.4},
                ],
            }
        )
    )
    return path


def test_the_quality_model_reads_a_hit_from_its_similarity_bin_and_nearest_profiled_k(tmp_path: Path) -> None:
    model = QualityModel.from_profile(_profile_file(tmp_path))
    assert model.fresh == 0.9
    # a hit's quality, and its own bin's fresh quality (hit + drop) it is compared with
    assert model.hit(0.95, 5) == pytest.approx((0.88, 0.9))
    assert model.hit(0.8, 5) == pytest.approx((0.6, 0.9))
    assert model.hit(1.0, 5) == pytest.approx((0.88, 0.9))  # the top bin includes 1.0
    assert model.hit(0.5, 5) == pytest.approx((0.6, 0.9))  # below every bin: the nearest
    assert model.hit(0.95, 20) == pytest.approx((0.5, 0.9))  # k 20 was not profiled: the nearest K (25)


def test_a_hit_is_compared_with_the_fresh_generations_of_its_own_bins_pairs(tmp_path: Path) -> None:
    """Bins of MIN_LIVE_PAIRS pairs from the most similar down; the queries of similar pairs are easy
    (fresh 0.9 where all pairs' mean is lower), so a hit's drop is its bin's, not against that mean."""
    easy = [{"similarity": 0.9 - i / 1000, "fresh": 0.9, "hits": {"25": 0.85}} for i in range(MIN_LIVE_PAIRS)]
    hard = [
        {"similarity": 0.5 - i / 1000, "fresh": 0.5, "hits": {"25": 0.2}} for i in range(MIN_LIVE_PAIRS + 3)
    ]
    path = tmp_path / "measured.json"
    path.write_text(json.dumps({"fresh_quality": 0.68, "curve": [], "measurements": easy + hard}))
    model = QualityModel.from_profile(path)
    assert [len(rows) for rows in model.bins.values()] == [2]  # the 3 left at the bottom joined the bin above
    assert model.hit(0.95, 25) == pytest.approx((0.85, 0.9))  # a drop of 0.05, not 0.68 - 0.85
    assert model.hit(0.7, 25) == pytest.approx((0.2, 0.5))  # below the easy bin's lowest pair: the next bin
    assert model.hit(0.0, 25) == pytest.approx((0.2, 0.5))  # the lowest bin reaches 0
    judged, _ = simulated_quality(
        [_outcome(0, hit=True), _outcome(1, hit=False)],
        prompts=["a small red circle on the left on a plain white background"] * 2,
        hit_policy=HitPolicy.RESUME,
        small_name="small",
        override=path,
    )
    assert [value for o in judged for value in (o.quality, o.fresh_quality)] == pytest.approx(
        [0.85, 0.9, 0.68, 0.68]
    )


def _outcome(
    seq: int, *, hit: bool, quality: float | None = None, fresh: float | None = None
) -> RequestOutcome:
    return RequestOutcome(
        seq=seq,
        prompt_idx=seq,
        status="succeeded",
        hit=hit,
        k=10 if hit else None,
        steps=50,
        denoiser_evaluations={"small" if hit else "large": 40 if hit else 50},
        similarity=0.95 if hit else None,
        quality=quality,
        fresh_quality=fresh,
    )


def test_summarize_quality_means_hits_and_misses_and_their_drop() -> None:
    outcomes = [
        _outcome(0, hit=True, quality=0.8, fresh=1.0),
        _outcome(1, hit=True, quality=1.0, fresh=1.0),
        _outcome(2, hit=False, quality=0.6, fresh=0.6),
        _outcome(3, hit=True, quality=0.7),  # judged, not compared
    ]
    quality = summarize_quality(outcomes, "test")
    assert quality is not None
    assert quality.hit_mean == pytest.approx(2.5 / 3) and quality.miss_mean == pytest.approx(0.6)
    # Over all requests by stratum: 3 of 4 judged requests are hits, their audited drop 0.1 (the
    # mean over the compared ones, 0.2 / 3, would weigh the hits by the sample instead).
    assert quality.drop_mean == pytest.approx(0.75 * 0.1) and quality.hit_drop_mean == pytest.approx(0.1)
    assert (quality.judged, quality.compared, quality.audited) == (4, 3, 2)
    assert [(b.similarity_lo, b.k, b.n) for b in quality.by_bin] == [(0.95, 10, 2)]
    low, high = quality.drop_ci95 or (1.0, -1.0)
    assert low <= 0.075 <= high
    assert summarize_quality(outcomes, "test", interval=False).drop_ci95 is None  # type: ignore[union-attr]
    assert summarize_quality(outcomes, None) is None


def test_simulated_quality_applies_a_profile_only_to_a_lab_trace(tmp_path: Path) -> None:
    outcomes = [_outcome(0, hit=True), _outcome(1, hit=False)]
    lab_prompts = ["a small red circle on the left on a plain white background"] * 2
    judged, source = simulated_quality(
        outcomes,
        prompts=lab_prompts,
        hit_policy=HitPolicy.RESUME,
        small_name="small",
        override=_profile_file(tmp_path),
    )
    assert source is not None and "profile.json" in source
    assert [(o.quality, o.fresh_quality) for o in judged] == [(0.88, 0.9), (0.9, 0.9)]
    assert is_lab_trace(lab_prompts) and not is_lab_trace(["an astronaut riding a horse"])
    untouched, none = simulated_quality(
        outcomes,
        prompts=["an astronaut riding a horse"] * 2,
        hit_policy=HitPolicy.RESUME,
        small_name="small",
        override=None,
    )
    assert none is None and untouched == outcomes
