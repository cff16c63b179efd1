"""LatentBox's dual-format cache (4.2) and its marginal-hit tuner (4.3): pure bookkeeping."""

from __future__ import annotations

import pytest

from jobs.policies.dual_format import DualFormatCache, LruTier, Tier, WindowCounts
from jobs.policies.tier_tuning import MarginalTuner, gradient, step_alpha


def test_an_lru_tier_evicts_the_least_recent_through_its_tail() -> None:
    tier = LruTier(100, tau=0.2)  # main 80 bytes, tail 20
    for key in "abcde":
        assert tier.insert(key, 20) == []  # 100 bytes fit: a b sit in the tail... a first
    assert list(tier.tail) == ["a"] and tier.used == 100
    assert tier.touch("a") is True  # a tail hit, and a goes back to the head of main
    assert list(tier.tail) == ["b"]
    assert tier.insert("f", 20) == ["b"]  # b is the least recent
    assert "b" not in tier and tier.used == 100
    assert tier.resize(60) == ["c", "d"]


def test_a_fetched_latent_is_promoted_after_h_latent_hits() -> None:
    cache: DualFormatCache[bytes] = DualFormatCache(capacity=1000, alpha=0.5, promote_after=2)
    assert cache.lookup("x").tier is Tier.MISS
    assert cache.admit("x", latent=(b"L", 10), image=(b"I", 50)) is Tier.LATENT
    first = cache.lookup("x")
    assert (first.tier, first.value, first.promote) == (Tier.LATENT, b"L", False)
    second = cache.lookup("x")
    assert second.promote is True
    assert cache.promote("x", b"I", 50)
    assert cache.tier_of("x") is Tier.IMAGE  # in exactly one tier
    assert cache.latents.used == 0 and cache.images.used == 50
    assert cache.lookup("x").value == b"I"
    assert (cache.totals.misses, cache.totals.latent_hits, cache.totals.image_hits) == (1, 2, 1)


def test_images_only_admits_the_image_and_latents_only_never_promotes() -> None:
    images_only: DualFormatCache[None] = DualFormatCache(capacity=100, alpha=1.0, promote_after=8)
    assert images_only.admit("x", latent=(None, 10), image=(None, 50)) is Tier.IMAGE
    latents_only: DualFormatCache[None] = DualFormatCache(capacity=100, alpha=0.0, promote_after=0)
    latents_only.admit("x", latent=(None, 10), image=(None, 50))
    assert latents_only.lookup("x").promote is False


def test_the_budget_holds_when_alpha_moves() -> None:
    cache: DualFormatCache[None] = DualFormatCache(capacity=100, alpha=0.5, promote_after=1)
    for key in "abcde":
        cache.admit(key, latent=(None, 10), image=(None, 25))
        cache.lookup(key)
        cache.promote(key, None, 25)
    assert cache.images.used <= 50 and cache.totals.evictions == 3  # two images of 25 fit in 50
    cache.set_alpha(0.25)
    assert cache.images.used <= 25 and cache.latents.used <= 75
    assert cache.images.used + cache.latents.used <= 100


def test_the_window_counts_tail_hits_as_marginal_hits() -> None:
    cache: DualFormatCache[None] = DualFormatCache(capacity=100, alpha=0.0, tau=0.5, promote_after=99)
    for key in "abcde":
        cache.admit(key, latent=(None, 20), image=None)
    cache.lookup("a")  # in the tail: a marginal latent hit
    cache.lookup("e")  # in main
    cache.lookup("zz")  # a full miss
    window = cache.close_window()
    assert (window.requests, window.image_misses, window.full_misses, window.latent_tail_hits) == (3, 3, 1, 1)
    assert cache.window.requests == 0


def test_the_gradient_follows_equation_2() -> None:
    counts = WindowCounts(
        requests=100, image_misses=40, image_tail_hits=10, full_misses=8, latent_tail_hits=2
    )
    measured = gradient(counts, t_decode_s=0.04, t_fetch_s=0.14)
    assert measured.mr_img == pytest.approx(0.4) and measured.mr_lat == pytest.approx(0.2)
    expected = -0.1 * (0.04 + 0.14 * 0.2) + 0.14 * 0.4 * 0.05
    assert measured.d == pytest.approx(expected)
    assert step_alpha(0.5, measured.d) == pytest.approx(0.505)  # D < 0: the image tier gains
    assert step_alpha(0.5, 1.0) == pytest.approx(0.495)
    assert step_alpha(1.0, -1.0) == 1.0


def test_the_tuner_tracks_latencies_and_holds_a_fixed_split() -> None:
    tuner = MarginalTuner(window=2)
    for _ in range(50):
        tuner.observe_decode(0.5)
    assert tuner.t_decode_s == pytest.approx(0.5, rel=0.01)
    counts = WindowCounts(requests=2, image_misses=2, image_tail_hits=0, full_misses=2, latent_tail_hits=1)
    assert tuner.due(counts)
    assert tuner.decide(0.5, counts, promote_after=8).alpha < 0.5  # latent tail hits: latents gain
    fixed = MarginalTuner(window=2, adaptive=False)
    assert fixed.decide(0.5, counts, promote_after=8).alpha == 0.5
