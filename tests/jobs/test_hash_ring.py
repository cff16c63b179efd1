"""Consistent-hash routing with spillover (LatentBox 4.4)."""

from __future__ import annotations

from collections import Counter

import pytest

from jobs.policies.hash_ring import HashRing, place

IDS = [f"job-{index}.png" for index in range(6000)]


def test_each_node_owns_about_its_share() -> None:
    ring = HashRing(["a", "b", "c"])
    shares = Counter(ring.owner(key) for key in IDS)
    assert set(shares) == {"a", "b", "c"}
    assert all(1500 < count < 2500 for count in shares.values())


def test_a_joining_node_takes_only_its_share_and_a_leaving_one_gives_only_its_own() -> None:
    before = HashRing(["a", "b", "c"])
    after = HashRing(["a", "b", "c", "d"])
    moved = [key for key in IDS if before.owner(key) != after.owner(key)]
    assert all(after.owner(key) == "d" for key in moved)  # nothing moves between nodes that stay
    assert 0.15 < len(moved) / len(IDS) < 0.35  # about 1/4
    without_b = HashRing(["a", "c"])
    for key in IDS:
        if before.owner(key) != "b":
            assert without_b.owner(key) == before.owner(key)


def test_the_owner_serves_until_its_queue_passes_theta() -> None:
    assert not place("a", {"a": 4, "b": 0}, theta=4).spilled
    spill = place("a", {"a": 5, "b": 2, "c": 1}, theta=4)
    assert spill.spilled and spill.node == "c" and spill.owner == "a"
    assert not place("a", {"a": 9, "b": 9}, theta=4).spilled  # nobody is less loaded
    assert not place("a", {"a": 9}, theta=4).spilled


def test_a_ring_needs_nodes() -> None:
    with pytest.raises(ValueError):
        HashRing([])
