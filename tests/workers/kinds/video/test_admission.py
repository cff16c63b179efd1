"""A video job's admission decision over its three matches (workers.kinds.video.admission.routed): FlexCache
4.2.1's choice in the threshold table's T = 50 scale, for a run of T = 10 storing states 2, 4, 6, 8."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import cast

import numpy as np
import pytest

from core.params import VideoParams
from core.settings import Settings, load_settings
from core.vocabulary import AdmissionOutcome, Route
from db.video_lookup import VideoMatch
from jobs.policies.video_hits import HitKind
from workers.context import WorkerContext
from workers.kinds.video.admission import decide_video, routed, video_table

SETTINGS = load_settings()
STORED = (2, 4, 6, 8)
FOX, BUS = uuid.uuid4(), uuid.uuid4()


def test_the_table_is_nirvanas_unless_one_is_configured() -> None:
    assert video_table(SETTINGS).name == "nirvana-t2t"
    assert video_table(SETTINGS.model_copy(update={"k_table": "lab-minilm"})).name == "lab-minilm"


def test_a_whole_match_maps_the_tables_k_back_to_the_runs_steps() -> None:
    # 0.86 > 0.85: k 15 of 50; the states stored, in that scale, are 10, 20, 30, 40: 10 -> step 2 of 10.
    decision = routed(SETTINGS, 10, VideoMatch(FOX, 0.86, STORED), None, None)
    assert decision.decision.route is Route.HIT and decision.decision.k == 2
    assert decision.video_hit is HitKind.WHOLE and decision.background_entry_id is None
    # 0.96: k 25 -> 20 of 50 stored -> step 4; on a T = 50 run the stored k itself.
    assert routed(SETTINGS, 10, VideoMatch(FOX, 0.96, STORED), None, None).decision.k == 4
    assert routed(SETTINGS, 50, VideoMatch(FOX, 0.96, (5, 10, 25)), None, None).decision.k == 25


def test_object_and_background_of_two_entries_stitch_when_their_min_beats_the_whole() -> None:
    decision = routed(
        SETTINGS,
        10,
        VideoMatch(FOX, 0.64, STORED),
        VideoMatch(FOX, 0.99, STORED),
        VideoMatch(BUS, 0.97, STORED),
    )
    assert decision.video_hit is HitKind.DECOUPLED
    assert decision.decision.source_entry_id == FOX and decision.background_entry_id == BUS
    assert decision.decision.k == 4 and decision.decision.similarity == 0.97


def test_a_pair_without_a_common_state_falls_back_to_the_whole_match() -> None:
    decision = routed(
        SETTINGS, 10, VideoMatch(FOX, 0.9, (2, 4)), VideoMatch(FOX, 0.99, (2,)), VideoMatch(BUS, 0.99, (6, 8))
    )
    assert decision.video_hit is HitKind.WHOLE and decision.decision.source_entry_id == FOX
    assert decision.decision.k == 2  # 0.9 is not above 0.90: k 15 of 50, of (10, 20) stored 10: step 2


def test_below_the_table_is_a_searched_miss_with_its_best_similarity() -> None:
    decision = routed(SETTINGS, 10, VideoMatch(FOX, 0.5, STORED), None, VideoMatch(BUS, 0.6, STORED))
    assert (
        decision.decision.outcome is AdmissionOutcome.SEARCHED_MISS and decision.decision.route is Route.MISS
    )
    assert decision.decision.similarity == 0.6 and decision.video_hit is None


class _RecordingEmbedder:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.calls: list[list[str]] = []

    def embed_text(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.ones((len(texts), self.dim), dtype=np.float32)


@dataclass
class _Context:
    settings: Settings
    embedder: _RecordingEmbedder

    def text_embedder(self) -> _RecordingEmbedder:
        return self.embedder


@pytest.mark.integration
@pytest.mark.parametrize("decoupled", [True, False])
def test_the_phrases_are_embedded_with_the_prompt_unless_decoupling_is_off(
    db_settings: Settings, decoupled: bool
) -> None:
    settings = db_settings.model_copy(update={"video_decoupled_lookup": decoupled})
    context = _Context(settings, _RecordingEmbedder(settings.text_embedding_dim))
    params = VideoParams(prompt="a red fox running on a sandy beach", steps=settings.steps, frames=8)
    decision = decide_video(cast(WorkerContext, context), params, uuid.uuid4(), shared_cache=False)
    assert decision.decision.outcome is AdmissionOutcome.SEARCHED_MISS  # a new tenant's empty scope
    phrases = ["a red fox running on a sandy beach", "a red fox running", "a sandy beach"]
    assert context.embedder.calls == [phrases if decoupled else phrases[:1]]  # one call for all three
