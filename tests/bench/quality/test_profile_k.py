"""`reprise profile k` end to end: the batched sampler matches the runtime, the profiler writes its table
(on the lab's models with the judge; on other models with CLIP score, checked for shape)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bench.quality.profiling import ProfileOptions, run_profile
from bench.quality.sampler import Sampler
from core.params import GenerationParams
from core.settings import Settings, load_settings
from core.vocabulary import LAB_ATTRIBUTES, LookupMode, Role
from reprise.cli import app as cli
from workers.runtime import DiffusionRuntime
from workers.runtime.loading import builtin_path

torch.set_num_threads(1)

pytestmark = pytest.mark.usefixtures("fresh_settings")  # tests.support.fixtures


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return load_settings(
        data_dir=tmp_path_factory.mktemp("profile-data"), device="cpu", steps=8, capture_steps="2,4"
    )


def test_the_batched_sampler_denoises_as_the_runtime_does(settings: Settings) -> None:
    tiny = load_settings(
        data_dir=settings.data_dir, device="cpu", steps=8, capture_steps="2,4", model_set="tiny"
    )
    runtime = DiffusionRuntime(tiny, Role.LARGE)
    sampler = Sampler(builtin_path(tiny, "tiny:large"), steps=8, guidance=7.5)
    prompts, seeds = ["a red barn", "a glass teapot on a table"], [3, 4]
    batch = sampler.generate(prompts, seeds, capture=[4])
    for row, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        params = GenerationParams(prompt=prompt, seed=seed, steps=8, width=64, height=64)
        alone = runtime.generate(params, capture=[4])
        assert np.allclose(batch.latents[row].numpy(), alone.final_latent, atol=1e-4)
        resumed = sampler.resume([prompt], batch.captured[4][row : row + 1], 4).latents[0]
        assert np.allclose(
            resumed.numpy(),
            runtime.resume(params, alone.captured[4], 4, family="tiny-sd").final_latent,
            atol=1e-4,
        )


def test_profiling_real_models_scores_with_clip_and_writes_the_contract(
    settings: Settings, tmp_path: Path
) -> None:
    """Other models than the lab's are judged by CLIP score (here the tiny random models and CLIP:
    the numbers are meaningless, the shape is what is checked)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(
        "\n".join(
            f"a photo of a {word} on a table"
            for word in ["cat", "dog", "cup", "pen", "box", "car", "bus", "toy"]
        )
    )
    tiny = load_settings(
        data_dir=settings.data_dir, device="cpu", steps=8, capture_steps="2,4", model_set="tiny"
    )
    options = ProfileOptions(
        large="tiny:large",
        hit="tiny:small",
        pairs=8,
        ks=(2, 4),
        tolerance=0.02,
        mode=LookupMode.TEXT_TO_TEXT,
        steps=8,
        guidance=7.5,
        seed=0,
        prompts_file=prompts,
    )
    report = run_profile(tiny, options, log=lambda _: None)
    assert report["judge"].startswith("CLIP score") and report["pairs"] == 8
    assert {point["k"] for point in report["curve"]} == {2, 4}
    assert all(0.0 <= point["hit_quality"] <= 1.0 for point in report["curve"])
    assert isinstance(report["table"], list)


def test_the_profile_command_profiles_the_lab_models_with_the_judge(
    settings: Settings, tmp_path: Path
) -> None:
    out, plot = tmp_path / "profile.json", tmp_path / "profile.png"
    env = {"REPRISE_DATA_DIR": str(settings.data_dir), "REPRISE_STEPS": "8", "REPRISE_CAPTURE_STEPS": "2,4"}
    args = ["profile", "k", "--prompts", "16", "--json", str(out), "--plot", str(plot)]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert {"table", "embedder", "models", "tolerance"} <= set(report)
    assert report["embedder"] == "minilm:all-MiniLM-L6-v2" and report["models"] == {
        "large": "lab:large",
        "hit": "lab:small",
    }
    assert report["pair_kinds"] == {"paraphrase": 4, "one-off": 4, "two-off": 4, "unrelated": 4}
    assert 0.0 < report["fresh_quality"] <= 1.0 and plot.stat().st_size > 0
    rows = report["table"]
    assert [row["k"] for row in rows] == sorted((row["k"] for row in rows), reverse=True)
    assert len(report["measurements"]) == 16
    # The table again at another tolerance, from the measurements alone: everything allowed at tolerance 1.
    again = CliRunner().invoke(
        cli, ["profile", "k", "--from", str(out), "--tolerance", "1", "--json", str(out)], env=env
    )
    assert again.exit_code == 0, again.output
    loose = json.loads(out.read_text())
    assert loose["tolerance"] == 1 and [row["k"] for row in loose["table"]] == [4, 2]


def test_image_mode_profiles_refine_hits_by_prompt_to_image_similarity_on_the_lab(settings: Settings) -> None:
    """MoDM's lookup on the lab: a pair's similarity is the query against the judge's description of the
    cached image (MiniLM), and hits refine the cached final latent."""
    options = ProfileOptions(
        large="lab:large",
        hit="lab:small",
        pairs=16,
        ks=(2, 4),
        tolerance=0.02,
        mode=LookupMode.TEXT_TO_IMAGE,
        steps=8,
        guidance=7.5,
        seed=3,
    )
    report = run_profile(settings, options, log=lambda _: None)
    assert report["mode"] == "image" and report["hit_operation"] == "refine"
    assert report["embedder"] == LAB_ATTRIBUTES
    text = run_profile(settings, replace(options, mode=LookupMode.TEXT_TO_TEXT), log=lambda _: None)
    image_sims = [m["similarity"] for m in report["measurements"]]
    text_sims = [m["similarity"] for m in text["measurements"]]
    assert image_sims != text_sims and all(-1.0 <= s <= 1.0 for s in image_sims)
    # Every cached image's reading is kept with its prompt (the simulator draws its keys from them):
    # a unit vector of the lab's space, for a prompt of the lab's world.
    from bench.workload.lab_space import profiled_readings

    readings = profiled_readings(report["readings"])
    assert len(readings) == 16 and "readings" not in text
    assert all(abs(float(np.linalg.norm(reading.vector)) - 1.0) < 1e-3 for reading in readings)
