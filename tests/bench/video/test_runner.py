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
        get_settings(),
        video_pipe,
        requests=150,
        compression_prompts=1,
        frames=2,
        compression_steps=8,
        compression_capture=(2, 4),
        budget_share=0.2,
    )
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
    with pytest.raises(ValueError, match="neither 'lab', 'moving' nor a prompts file"):
        trace_prompts(str(tmp_path / "missing.txt"), 5, 0)


def test_a_moving_trace_recombines_its_objects_and_backgrounds_in_captions_the_judge_reads() -> None:
    from lab.motion_captions import parse

    prompts = trace_prompts("moving", 300, 3)
    scenes = [parse(prompt) for prompt in prompts]

    assert prompts == trace_prompts("moving", 300, 3) and all(scene is not None for scene in scenes)
    objects = [(s["a_shape"], s["a_color"], s["motion"]) for s in scenes if s is not None]
    grounds = [(s["background_color"], s["background_texture"]) for s in scenes if s is not None]
    pairs = set(zip(objects, grounds, strict=True))
    # Zipf's law over pools of 40 objects and 20 backgrounds: each recurs, and in new combinations.
    assert len(set(objects)) < 40 and len(set(grounds)) <= 20 and len(pairs) > 2 * len(set(grounds))
    assert max(objects.count(o) for o in set(objects)) > 20
