"""`reprise bench video`'s figures and their JSON contract: compression and resume error from
the tiny video model, hit rates, compute saved and throughput from the simulator's video profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.video.runner import measure_video, trace_prompts
from core.settings import get_settings
from workers.runtime.tiny import ensure_tiny_video_model
from workers.runtime.video import load_video_pipeline

CONTRACT = {
    "compression",
    "resume_error",
    "hit_rate",
    "compute_saved",
    "throughput_rps",
    "vanilla_throughput_rps",
}


@pytest.fixture(scope="module")
def video_pipe(tmp_path_factory: pytest.TempPathFactory) -> object:
    directory = ensure_tiny_video_model(Path(tmp_path_factory.mktemp("video-models")))
    return load_video_pipeline(str(directory), device=torch.device("cpu"), dtype=torch.float32)


def test_the_json_holds_the_contract_and_decoupling_pays_on_the_lab_trace(video_pipe: object) -> None:
    result = measure_video(
        get_settings(), video_pipe, requests=150, compression_prompts=1, frames=2,
        compression_steps=8, compression_capture=(2, 4), budget_share=0.2,
    )  # fmt: skip
    document = json.loads(json.dumps(result.as_json()))

    assert set(document) >= CONTRACT
    assert set(document["compression"]) == {"intra", "inter", "total"}
    assert set(document["hit_rate"]) == {"whole_prompt", "decoupled"}
    runs = document["configurations"]
    assert set(runs) == {"nirvana-video", "+ compression", "flexcache"}
    # The same trace and budget: compression keeps more states, decoupling serves more combinations.
    assert runs["+ compression"]["hit_rate"] >= runs["nirvana-video"]["hit_rate"]
    assert document["hit_rate"]["decoupled"] > document["hit_rate"]["whole_prompt"]
    assert runs["flexcache"]["by_kind"]["decoupled"] > 0
    assert document["throughput_rps"] > document["vanilla_throughput_rps"] > 0
    assert 0 < document["compute_saved"] < 1


def test_a_trace_is_the_lab_world_or_a_prompts_file(tmp_path: Path) -> None:
    assert len(trace_prompts("lab", 10, 0)) == 10
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat on the moon\n\nportrait of a knight\n")
    assert all(
        p.split(", ")[0] in {"a cat on the moon", "portrait of a knight"}
        for p in trace_prompts(str(prompts), 5, 0)
    )
    with pytest.raises(ValueError, match="neither 'lab' nor a prompts file"):
        trace_prompts(str(tmp_path / "missing.txt"), 5, 0)
