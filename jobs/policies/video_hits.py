"""FlexCache's hit decision for a video prompt, and which states the finished job saves.

Lookup (papers/flexcache-video-approximate-cache.txt 3.2, 4.2.1): the whole prompt, its object
phrase and its background phrase (jobs/policies/decoupling.py) are each looked up in their own
index, giving Sim_whole, Sim_object and Sim_background. FlexCache takes the higher of Sim_whole
and min(Sim_object, Sim_background) ("the minimum ... guarantees the quality", 5 "Vector
database"), and decouples only when min(...) > Sim_whole: on a tie the whole prompt wins (no
stitching). Only the object or only the background passing the threshold is no hit ("video
generation requires both"): the min is what must pass. The threshold is the table's lowest row
(0.65 in NIRVANA's table, which FlexCache follows).

k is `k_selection.choose_k` on the similarity used, with the knob and NIRVANA's holes (FlexCache
4.2.4 "Eviction" takes "the same approach as NIRVANA"): a decoupled hit stitches the object
entry's and the background entry's states at the same k, so k must be stored by both (the
largest k not above the chosen one that both still hold). When the preferred kind has no
usable k, the other kind is tried if it passes on its own (a decoupled pair with no common k
falls back to the whole match, and a whole match all holes to the pair); otherwise a miss.
We do not compare the two kinds' k after holes: the paper ranks by similarity, and a stitched
latent carries an error the table was not profiled with.

When the object and background matches are the same entry, stitching it with itself is that
entry: the hit is kind "whole" on it (nothing to stitch) with k from min(Sim_object,
Sim_background), and `scored_by` says the decoupled score won.

Insertion (4.2.4): a miss saves every capture step; a hit at step n saves the capture steps
after n ("the additional key steps between n and 25"); n at or past the last saves nothing.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum

from jobs.policies.k_selection import ThresholdTable, choose_k


class HitKind(StrEnum):
    """What a hit loads: one entry's states, or two entries' states stitched together."""

    WHOLE = "whole"
    DECOUPLED = "decoupled"


@dataclass(frozen=True, slots=True)
class Match:
    """The best match one index (whole prompt, object or background) found for a prompt: the
    entry, its cosine similarity, and the k whose states the entry still stores."""

    entry_id: uuid.UUID
    similarity: float
    stored_ks: Collection[int]

    def __post_init__(self) -> None:
        if not math.isfinite(self.similarity):
            raise ValueError(f"similarity {self.similarity!r} of entry {self.entry_id} is not finite")


@dataclass(frozen=True, slots=True)
class VideoHit:
    """A hit: load `entry_ids` at step k (kind whole: one entry; decoupled: the object entry,
    then the background entry, to stitch). `similarity` is the score k was chosen from:
    Sim_whole, or min(Sim_object, Sim_background) when `scored_by` is decoupled."""

    kind: HitKind
    entry_ids: tuple[uuid.UUID, ...]
    similarity: float
    k: int
    scored_by: HitKind

    @property
    def object_entry(self) -> uuid.UUID:
        """The entry whose latent gives the object (a whole hit's only entry)."""
        return self.entry_ids[0]

    @property
    def background_entry(self) -> uuid.UUID:
        """The entry whose latent gives the background (a whole hit's only entry)."""
        return self.entry_ids[-1]


def choose_video_hit(
    whole: Match | None,
    object_match: Match | None,
    background_match: Match | None,
    table: ThresholdTable,
    knob: int = 0,
) -> VideoHit | None:
    """FlexCache's choice (4.2.1) for one prompt's three best matches, or None for a miss.

    Any match may be None (an empty index; a prompt without a background phrase has no object
    or background lookup). The decoupled score is tried first only when it is strictly higher
    than Sim_whole; holes and the knob act through `choose_k` (see the module doc).
    """
    pair_similarity = _pair_similarity(object_match, background_match)
    decoupled_first = pair_similarity is not None and (whole is None or pair_similarity > whole.similarity)
    whole_hit = _whole_hit(whole, table, knob)
    decoupled_hit = _decoupled_hit(object_match, background_match, table, knob)
    first, second = (decoupled_hit, whole_hit) if decoupled_first else (whole_hit, decoupled_hit)
    return first if first is not None else second


def _pair_similarity(object_match: Match | None, background_match: Match | None) -> float | None:
    if object_match is None or background_match is None:
        return None
    return min(object_match.similarity, background_match.similarity)


def _whole_hit(whole: Match | None, table: ThresholdTable, knob: int) -> VideoHit | None:
    if whole is None:
        return None
    k = choose_k(whole.similarity, table, whole.stored_ks, knob)
    if k is None:
        return None
    return VideoHit(HitKind.WHOLE, (whole.entry_id,), whole.similarity, k, HitKind.WHOLE)


def _decoupled_hit(
    object_match: Match | None, background_match: Match | None, table: ThresholdTable, knob: int
) -> VideoHit | None:
    if object_match is None or background_match is None:
        return None
    similarity = min(object_match.similarity, background_match.similarity)
    common = set(object_match.stored_ks) & set(background_match.stored_ks)
    k = choose_k(similarity, table, common, knob)
    if k is None:
        return None
    if object_match.entry_id == background_match.entry_id:
        return VideoHit(HitKind.WHOLE, (object_match.entry_id,), similarity, k, HitKind.DECOUPLED)
    entries = (object_match.entry_id, background_match.entry_id)
    return VideoHit(HitKind.DECOUPLED, entries, similarity, k, HitKind.DECOUPLED)


def states_to_save(hit_k: int | None, capture_steps: Iterable[int]) -> tuple[int, ...]:
    """The capture steps whose states the finished job inserts (4.2.4), ascending.

    A miss (None) saves them all; a hit at step n (it started from a state after n steps, its
    own states exist only after n) saves those above n, so a hit at or past the last capture
    step saves none. Unlike NIRVANA's LCBFU, hits insert too (FlexCache 3.1.2, 4.2.4).
    """
    steps = sorted(set(capture_steps))
    if any(step < 1 for step in steps):
        raise ValueError(f"capture steps {steps} must be positive")
    if hit_k is None:
        return tuple(steps)
    if hit_k < 1:
        raise ValueError(f"a hit skips at least one step, not {hit_k}")
    return tuple(step for step in steps if step > hit_k)
