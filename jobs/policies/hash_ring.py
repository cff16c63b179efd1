"""LatentBox's routing (section 4.4): consistent hashing pins each image to an owner decode node, and
a node whose queue is deeper than theta spills the decode over to the least-loaded node.

The ring places `replicas` points per node (virtual nodes); an image belongs to the first point
clockwise of its hash. A node joining or leaving moves only the images whose point it takes or gave
up: about 1/N of them, never an image between two nodes that stay.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Points per node: with 128 a node's share stays within about 10% of 1/N (the classic ketama uses 160).
REPLICAS = 128
# Section 6.5.3's overflow threshold: a queue deeper than 4 decodes spills.
SPILL_THETA = 4


def _point(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Consistent hashing over a set of node names."""

    def __init__(self, nodes: Iterable[str], *, replicas: int = REPLICAS) -> None:
        self.nodes = tuple(sorted(set(nodes)))
        if not self.nodes:
            raise ValueError("a hash ring needs at least one node")
        points = sorted((_point(f"{node}#{index}"), node) for node in self.nodes for index in range(replicas))
        self._hashes = [point for point, _ in points]
        self._owners = [node for _, node in points]

    def owner(self, key: str) -> str:
        index = bisect.bisect(self._hashes, _point(key)) % len(self._hashes)
        return self._owners[index]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one read's decode runs: its owner, or a spillover node whose result goes back to it."""

    owner: str
    node: str

    @property
    def spilled(self) -> bool:
        return self.node != self.owner


def place(owner: str, depths: Mapping[str, int], *, theta: float = SPILL_THETA) -> Placement:
    """The owner serves unless its queue is deeper than theta; then the least-loaded node does (ties by
    name), when it is less loaded than the owner (section 4.4). A node with no known depth counts as 0."""
    owner_depth = depths.get(owner, 0)
    if owner_depth <= theta or len(depths) < 2:
        return Placement(owner, owner)
    least = min(sorted(depths), key=lambda node: depths[node])
    return Placement(owner, least if depths[least] < owner_depth else owner)
