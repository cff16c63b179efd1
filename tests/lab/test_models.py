"""The lab's trained models and judge, loaded like real models (from_pretrained) from committed weights."""

from __future__ import annotations

import json
import os
import platform
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from core.errors import SettingsError
from core.params import GenerationParams
from core.settings import Settings, load_settings
from core.vocabulary import Role
from lab.build import digests, pinned_cpu_kernels
from lab.captions import caption
from lab.judge import Judge
from lab.judge_floors import AGREEMENT_GOAL
from lab.models import WEIGHTS_DIR, ensure_lab_models, is_lab_model, lab_family
from lab.recipes import CURRENT, RECIPES, recipe_name
from lab.world import sample_scene
from reprise.cli import app as cli
from workers.runtime import DiffusionRuntime

torch.set_num_threads(1)
MAX_WEIGHT_BYTES = 20 * 1024 * 1024  # the committed weights stay small enough for the repository

pytestmark = pytest.mark.usefixtures("fresh_settings")  # tests.support.fixtures


@pytest.fixture(scope="module")
def lab_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return load_settings(
        data_dir=tmp_path_factory.mktemp("lab-data"), device="cpu", steps=20, capture_steps="5,10"
    )


def test_the_committed_weights_are_what_their_manifest_says_and_fit_the_budget() -> None:
    manifest = json.loads((WEIGHTS_DIR / "manifest.json").read_text())
    assert digests(WEIGHTS_DIR)["digest"] == manifest["digest"]  # retrained or edited: the manifest says so
    size = sum(path.stat().st_size for path in WEIGHTS_DIR.rglob("*") if path.is_file())
    assert size <= MAX_WEIGHT_BYTES
    assert manifest["command"] == "reprise models train" and manifest["judge_heldout_accuracy"] >= 0.95
    # the two judges agree on the models' own images as the lab's goal asks (lab.judge_floors)
    assert manifest["judge_validation"]["judge"]["generated_agreement"] >= AGREEMENT_GOAL


def test_built_model_names_resolve_to_their_latent_families() -> None:
    assert (load_settings().large_family, load_settings().small_family) == ("lab-a", "lab-a")
    assert load_settings(small_model="lab:small-b").small_family == "lab-b"
    assert load_settings(model_set="tiny").large_family == "tiny-sd"
    assert load_settings(large_model="/models/sd15").large_family == "default"
    assert load_settings(large_model="/models/sd15", large_family="sd1").large_family == "sd1"


def test_the_lab_pipelines_load_through_from_pretrained_and_generate(lab_settings: Settings) -> None:
    paths = ensure_lab_models(lab_settings)
    assert (
        is_lab_model(str(paths.pipeline("large"))) and lab_family(str(paths.pipeline("small-b"))) == "lab-b"
    )
    runtime = DiffusionRuntime(lab_settings, Role.LARGE)
    assert (runtime.model_name, runtime.family, runtime.native_size) == ("lab-large", "lab-a", 64)
    prompt = "a big red square on the left on a plain white background"
    params = GenerationParams(prompt=prompt, steps=20, width=64, height=64, seed=1)
    result = runtime.generate(params, capture=[10], decode=True)
    assert result.image is not None and result.image.size == (64, 64)
    assert result.denoiser_evals == {"lab-large": 20}


@pytest.mark.parametrize("role", [Role.LARGE, Role.SMALL])
def test_the_models_draw_what_prompts_ask_far_above_chance(lab_settings: Settings, role: Role) -> None:
    """Models that learned: the judge reads most of the asked attributes in the large model's images
    and in the small one's, distilled from it (lab.distillation; the same small UNet trained from data
    alone for as long judged at chance, about a third: the attributes' chance level)."""
    runtime = DiffusionRuntime(lab_settings, role)
    judge = Judge.load(ensure_lab_models(lab_settings).judge)
    rng = np.random.default_rng(11)
    prompts = [caption(sample_scene(rng), rng) for _ in range(12)]
    images = []
    for seed, prompt in enumerate(prompts):
        params = GenerationParams(prompt=prompt, steps=20, width=64, height=64, seed=seed)
        image = runtime.generate(params, decode=True).image
        assert image is not None
        images.append(image)
    scores = [q for q in judge.score(images, prompts) if q is not None]
    assert len(scores) == 12 and float(np.mean(scores)) > 0.5  # chance: 0.31 (`reprise lab quality`)


def test_the_quality_command_runs_the_models_at_the_steps_asked(
    tmp_path: Path, lab_settings: Settings
) -> None:
    out = tmp_path / "quality.json"
    args = ["lab", "quality", "--models", "lab:small", "--prompts", "4", "--steps", "3", "--json", str(out)]
    result = CliRunner().invoke(cli, args, env={"REPRISE_DATA_DIR": str(lab_settings.data_dir)})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["steps"] == 3 and list(report["models"]) == ["lab:small"]
    assert 0.0 <= report["models"]["lab:small"]["mean"] <= 1.0 and "lab:small" in result.output
    manifest = json.loads((WEIGHTS_DIR / "manifest.json").read_text())
    assert report["lab_weights"] == {"recipe": CURRENT, "digest": manifest["digest"]}  # what measured


def test_a_latent_of_the_first_family_refines_on_the_second_familys_model(lab_settings: Settings) -> None:
    settings = lab_settings.model_copy(update={"small_model": "lab:small-b", "small_family": "lab-b"})
    large, small_b = DiffusionRuntime(settings, Role.LARGE), DiffusionRuntime(settings, Role.SMALL)
    params = GenerationParams(
        prompt="a tiny blue disk in the middle on a checkered gray backdrop", steps=20, width=64, height=64
    )
    final = large.generate(params).final_latent
    refined = small_b.refine(params, final, "lab-a", 10, decode=True)
    assert refined.family == "lab-b" and refined.vae_decodes == 2  # decoded by vae-a, and the result
    assert refined.denoiser_evals == {"lab-small-b": 10}


def test_the_judge_command_validates_the_judge_on_held_out_images(
    tmp_path: Path, lab_settings: Settings
) -> None:
    out = tmp_path / "judge.json"
    args = ["lab", "judge", "--images", "300", "--generated", "0", "--json", str(out)]
    result = CliRunner().invoke(cli, args, env={"REPRISE_DATA_DIR": str(lab_settings.data_dir)})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["heldout_images"] == 300 and report["attribute_accuracy"] >= 0.95
    assert report["lab_weights"]["recipe"] == CURRENT
    assert report["blurred_accuracy"] >= 0.9 and report["noisy_accuracy"] >= 0.9


def test_the_judge_command_reports_a_rival_of_the_judge_s_kind_on_the_same_images(
    tmp_path: Path, lab_settings: Settings
) -> None:
    out = tmp_path / "judge.json"
    args = ["lab", "judge", "--images", "20", "--generated", "2", "--steps", "1", "--rival-steps", "3"]
    env = {"REPRISE_DATA_DIR": str(lab_settings.data_dir)}
    result = CliRunner().invoke(cli, [*args, "--json", str(out)], env=env)
    assert "a rival of the judge's own kind" in result.output, result.output
    rival = json.loads(out.read_text())["rival"]
    assert rival["steps"] == 3 and rival["architecture"] == "cnn-3x3"
    assert 0.0 <= rival["generated_agreement"] <= 1.0
    assert set(rival["agreement_per_model"]) == {"large", "small"}
    trip = json.loads(out.read_text())["round_trip"]
    assert trip["images"] == 2 and {"agreement_judge_b", "agreement_rival", "score"} <= set(trip)


def test_smoke_training_writes_the_contract_and_reproduces_its_weights(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    env = {"REPRISE_DATA_DIR": str(tmp_path / "data")}
    args = ["models", "train", "--smoke", "--out", str(tmp_path / "weights"), "--json", str(out)]
    first = CliRunner().invoke(cli, args, env=env)
    assert first.exit_code == 0, first.output
    report = json.loads(out.read_text())
    assert set(report["models"]) == {"large", "small", "small-b"} and report["seconds"] > 0
    again = CliRunner().invoke(cli, [*args[:-2], "--json", str(tmp_path / "again.json")], env=env)
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "again.json").read_text())["digest"] == report["digest"]
    # The distilled student alone, from the teacher and VAE of that run: the same bytes again.
    only = CliRunner().invoke(cli, [*args[:-2], "--only", "unet-small"], env=env)
    assert only.exit_code == 0, only.output
    assert json.loads((tmp_path / "weights" / "manifest.json").read_text())["digest"] == report["digest"]
    smoke = load_settings(
        data_dir=tmp_path / "data",
        device="cpu",
        large_model=report["models"]["large"],
        large_family="smoke",
        steps=4,
        capture_steps="2",
    )
    params = GenerationParams(prompt="a red box", steps=4, width=64, height=64)
    result = DiffusionRuntime(smoke, Role.LARGE).generate(params)
    assert result.final_latent.shape == (8, 8, 8)


def test_the_committed_weights_are_the_newest_recipes_and_another_needs_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lab/weights holds the set of the newest recipe (lab.recipes.RECIPES), which its manifest names;
    `--recipe` trains another, a results page's, only into a directory of its own, and names no recipe
    there is not."""
    manifest = json.loads((WEIGHTS_DIR / "manifest.json").read_text())
    assert manifest["recipe"] == json.loads(json.dumps(asdict(RECIPES[CURRENT].models)))
    assert manifest["stages_recipe"] == asdict(RECIPES[CURRENT].stages) and max(RECIPES) == CURRENT
    assert recipe_name(manifest) == CURRENT
    other_stages = manifest["stages_recipe"] | {"judge_b_steps": 1}
    assert recipe_name(manifest | {"stages_recipe": other_stages}) is None  # a recipe there is not
    monkeypatch.setitem(RECIPES, "2000-01-01", RECIPES[CURRENT])
    env = {"REPRISE_DATA_DIR": str(tmp_path / "data")}
    into_committed = CliRunner().invoke(cli, ["models", "train", "--recipe", "2000-01-01"], env=env)
    assert into_committed.exit_code == 1 and "--out" in into_committed.output
    unknown = ["models", "train", "--recipe", "1999-01-01", "--out", str(tmp_path / "w")]
    refused = CliRunner().invoke(cli, unknown, env=env)
    assert refused.exit_code == 1 and CURRENT in refused.output and not (tmp_path / "w").exists()
    assert (WEIGHTS_DIR / "manifest.json").read_text() == json.dumps(manifest, indent=2) + "\n"


def test_training_pins_the_cpu_kernels_and_gives_the_environment_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same seed trains the same weights on any x86-64 CPU only with the kernels' instruction set
    pinned (lab.build.PINNED_KERNELS); an operator's own setting wins, and nothing leaks after."""
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    with pinned_cpu_kernels() as kernels:
        assert kernels == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
        assert os.environ["ATEN_CPU_CAPABILITY"] == "avx2"
    assert "ATEN_CPU_CAPABILITY" not in os.environ and os.environ["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE"
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    with pinned_cpu_kernels() as kernels:
        assert kernels == {} and "ATEN_CPU_CAPABILITY" not in os.environ


def test_an_assembly_whose_weights_are_gone_is_assembled_again(tmp_path: Path) -> None:
    """Two checkouts sharing a data directory share the assembled pipelines, which link to the weights of
    the one that assembled them: once that checkout is removed, the next start assembles them again."""
    first, second = tmp_path / "first", tmp_path / "second"
    for copy in (first, second):
        shutil.copytree(WEIGHTS_DIR, copy)
    settings = load_settings()
    paths = ensure_lab_models(settings, weights=first, out=tmp_path / "models")
    assert (paths.root / "large" / "unet").resolve().is_relative_to(first)
    shutil.rmtree(first)
    assert not paths.complete
    again = ensure_lab_models(settings, weights=second, out=tmp_path / "models")
    assert again.root == paths.root and again.complete
    assert (again.root / "large" / "unet").resolve().is_relative_to(second)


def test_the_lab_serves_the_weights_its_setting_names(tmp_path: Path) -> None:
    """REPRISE_LAB_WEIGHTS points the lab at another trained set (a `reprise models train --out`
    directory): its pipelines are assembled from it, apart from the committed set's, keyed by its own
    manifest; a directory without a manifest is refused with the fix."""
    retrained = tmp_path / "retrained"
    shutil.copytree(WEIGHTS_DIR, retrained)
    manifest = json.loads((retrained / "manifest.json").read_text())
    (retrained / "manifest.json").write_text(json.dumps(manifest | {"digest": "f" * 64}))
    committed = ensure_lab_models(load_settings(), out=tmp_path / "models")
    paths = ensure_lab_models(load_settings(lab_weights=str(retrained)), out=tmp_path / "models")
    assert paths.weights == retrained and paths.root != committed.root
    assert paths.root.name.endswith("f" * 12) and committed.weights == WEIGHTS_DIR
    assert (paths.root / "large" / "unet").resolve().is_relative_to(retrained)
    with pytest.raises(SettingsError, match="reprise models train"):
        load_settings(lab_weights=str(tmp_path / "empty"))
