"""The drop of a run: its stratified mean and bootstrap interval, the by-bin aggregation, the replay's
uniform sample of audited hits, and the simulator's quality model refitted from a replay's bins."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.quality.drops import BinDrop, Strata, by_bin, drop_interval, stratified_drop
from bench.quality.model import MIN_LIVE_PAIRS, QualityModel, live_drops, simulated_quality
from bench.run.outcomes import RequestOutcome, summarize_quality
from bench.run.replayed import audit_sample, replay_quality
from core.vocabulary import HitPolicy


def test_every_hit_audited_gives_the_plain_mean_over_all_requests() -> None:
    strata = Strata(hits=3, others=5, hit_drops=[0.3, 0.0, 0.3], other_drops=[0.0] * 5)
    assert stratified_drop(strata) == pytest.approx(0.6 / 8)


def test_a_sample_of_hits_is_weighed_by_how_many_hits_there_were() -> None:
    # 40 hits of 100, 10 audited at 0.2 each: 0.4 x 0.2, not 10 x 0.2 / 70 as a mean of the compared.
    strata = Strata(hits=40, others=60, hit_drops=[0.2] * 10, other_drops=[0.0] * 60)
    assert stratified_drop(strata) == pytest.approx(0.08)


def test_no_drop_without_an_audited_hit_and_zero_without_a_hit() -> None:
    assert stratified_drop(Strata(hits=4, others=6, hit_drops=[], other_drops=[0.0] * 6)) is None
    assert drop_interval(Strata(hits=4, others=6, hit_drops=[], other_drops=[0.0] * 6)) is None
    none_hit = Strata(hits=0, others=6, hit_drops=[], other_drops=[0.0] * 6)
    assert stratified_drop(none_hit) == 0.0 and drop_interval(none_hit) == (0.0, 0.0)


def test_the_interval_covers_the_true_drop_about_95_times_in_100() -> None:
    """Runs of 300 requests with a true hit rate 0.3 and hit drops uniform on 0..0.5 (mean 0.25):
    true drop 0.075. The interval must hold it in most runs and narrow with more audits."""
    rng = np.random.default_rng(7)
    covered = 0
    widths: dict[int, list[float]] = {16: [], 64: []}
    for run in range(60):
        hits = int(rng.binomial(300, 0.3))
        drops = rng.uniform(0.0, 0.5, size=hits)
        for sample, width in widths.items():
            strata = Strata(hits, 300 - hits, list(drops[:sample]), [0.0] * (300 - hits))
            interval = drop_interval(strata, resamples=500, seed=run)
            assert interval is not None
            width.append(interval[1] - interval[0])
            if sample == 64:
                covered += interval[0] <= 0.075 <= interval[1]
    assert covered >= 52  # 95% of 60 is 57; a binomial's 3 standard errors below is 55, with room
    assert np.mean(widths[64]) < np.mean(widths[16])


def test_hits_are_grouped_by_the_profilers_bins_and_k() -> None:
    rows = by_bin([(0.97, 25, 0.1), (1.0, 25, 0.3), (0.96, 10, 0.0), (0.72, 5, 0.4), (0.5, 5, 0.2)])
    assert [(r.similarity_lo, r.similarity_hi, r.k, r.n) for r in rows] == [
        (0.0, 0.6, 5, 1),
        (0.7, 0.8, 5, 1),
        (0.95, 1.0, 10, 1),
        (0.95, 1.0, 25, 2),  # the top bin holds 1.0
    ]
    assert rows[-1].drop_mean == pytest.approx(0.2)
    assert BinDrop.from_json(rows[-1].as_json()) == rows[-1]


def _hit(seq: int, similarity: float = 0.97, k: int = 25) -> RequestOutcome:
    return RequestOutcome(
        seq=seq, prompt_idx=seq, status="succeeded", hit=True, k=k, steps=50, similarity=similarity
    )


def _miss(seq: int) -> RequestOutcome:
    return RequestOutcome(seq=seq, prompt_idx=seq, status="succeeded", hit=False, k=None, steps=50)


def _job(quality: float | None) -> dict[str, object]:
    return {"metrics": {"quality": quality}}


def test_the_audited_hits_are_a_seeded_uniform_draw_of_the_judged_hits() -> None:
    outcomes = [_hit(i) if i % 2 else _miss(i) for i in range(200)]
    jobs = [_job(None if i == 1 else 0.5) for i in range(200)]  # hit 1 was not judged
    picked = audit_sample(outcomes, jobs, 20)
    assert len(picked) == 20 and picked == sorted(picked) and picked == audit_sample(outcomes, jobs, 20)
    assert all(outcomes[i].hit for i in picked) and 1 not in picked
    assert max(picked) > 100  # not the first 20 hits in request order
    assert audit_sample(outcomes[:10], jobs[:10], 20) == [3, 5, 7, 9]  # fewer than asked: every one


def test_replay_quality_compares_audited_hits_and_misses_only() -> None:
    outcomes = [_hit(0), _hit(1), _miss(2), _hit(3)]
    jobs = [_job(0.5), _job(0.6), _job(0.8), _job(0.7)]
    judged, source = replay_quality(outcomes, jobs, audits={0: 0.9, 3: None})  # 3's audit failed
    assert [o.fresh_quality for o in judged] == [0.9, None, 0.8, None]
    assert (
        source is not None
        and "1 of 3 requests served with less than the full model" in source
        and "bootstrap" in source
    )
    quality = summarize_quality(judged, source)
    assert quality is not None and quality.audited == 1
    assert quality.drop_mean == pytest.approx(0.75 * 0.4)
    assert replay_quality(outcomes, [_job(None)] * 4, audits={}) == (outcomes, None)


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "profile.json"
    curve = [
        {"k": 25, "similarity_low": 0.95, "similarity_high": 1.0, "hit_quality": 0.9, "drop": 0.0},
        {"k": 25, "similarity_low": 0.9, "similarity_high": 0.95, "hit_quality": 0.85, "drop": 0.05},
    ]
    path.write_text(json.dumps({"fresh_quality": 0.9, "models": {}, "curve": curve}))
    return path


def _replay_json(tmp_path: Path, rows: list[BinDrop]) -> Path:
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"profile": "configured", "quality": {"by_bin": [r.as_json() for r in rows]}}))
    return path


def test_a_live_bin_with_enough_hits_replaces_the_profile_and_a_thin_one_falls_back(tmp_path: Path) -> None:
    rows = [
        BinDrop(0.95, 1.0, 25, MIN_LIVE_PAIRS, 0.2),  # enough audited hits: the live drop
        BinDrop(0.9, 0.95, 25, MIN_LIVE_PAIRS - 1, 0.5),  # too few: the profile's bin stands
    ]
    model = QualityModel.from_profile(_profile(tmp_path)).refitted(
        live_drops(_replay_json(tmp_path, rows)), "r"
    )
    assert model.hit(0.97, 25) == pytest.approx((0.9 - 0.2, 0.9))
    assert model.hit(0.92, 25) == pytest.approx((0.85, 0.9))
    assert model.hit(0.97, 10) == pytest.approx((0.9, 0.9))  # another k: the profile's nearest K
    assert "1 of 2 live bins" in model.source


def test_the_simulator_predicts_a_refitted_drop(tmp_path: Path) -> None:
    replay = _replay_json(tmp_path, [BinDrop(0.95, 1.0, 25, 40, 0.2)])
    prompts = ["a small red circle on the left on a plain white background"] * 2
    judged, source = simulated_quality(
        [_hit(0), _miss(1)],
        prompts=prompts,
        hit_policy=HitPolicy.RESUME,
        small_name="small",
        override=_profile(tmp_path),
        live=replay,
    )
    assert source is not None and "refitted from replay.json" in source
    quality = summarize_quality(judged, source, interval=False)
    assert quality is not None and quality.drop_mean == pytest.approx(0.1) and quality.drop_ci95 is None
    assert [(b.k, b.n, round(b.drop_mean, 4)) for b in quality.by_bin] == [(25, 1, 0.2)]


def test_a_replay_without_bins_cannot_refit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quality-sample"):
        live_drops(_replay_json(tmp_path, []))


def test_light_images_kept_and_step_cached_runs_are_audited_and_weigh_in_the_drop_by_stratum() -> None:
    from bench.live.records import served_by
    from bench.run.outcomes import Served

    assert served_by({"route": "hit"}, step_cache=True) is Served.HIT
    assert served_by({"route": "miss", "cascade": {"escalated": False}}, step_cache=False) is Served.LIGHT
    assert served_by({"route": "miss", "cascade": {"escalated": True}}, step_cache=False) is Served.FULL
    assert served_by({"route": "miss"}, step_cache=True) is Served.STEP_CACHE
    light = replace(_miss(1), served=Served.LIGHT)
    cached = replace(_miss(2), served=Served.STEP_CACHE)
    outcomes = [_hit(0), light, cached, _miss(3)]
    assert audit_sample(outcomes, [_job(0.5)] * 4, 10) == [0, 1, 2]  # every reduced one; the full miss not
    judged, source = replay_quality(outcomes, [_job(0.5)] * 4, audits={0: 0.6, 1: 0.7, 2: 0.5})
    quality = summarize_quality(judged, source)
    assert quality is not None
    # Three of four requests reduced, their drops 0.1, 0.2, 0.0; the full miss drops nothing.
    assert quality.drop_mean == pytest.approx(3 / 4 * (0.1 + 0.2 + 0.0) / 3)
    assert quality.by_stratum["light"] == {"n": 1, "compared": 1, "drop_mean": pytest.approx(0.2)}
    assert quality.by_stratum["step_cache"]["drop_mean"] == pytest.approx(0.0)
    assert quality.by_stratum["full"] == {"n": 1, "compared": 1, "drop_mean": 0.0}
