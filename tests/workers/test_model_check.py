"""`reprise models check` (workers/runtime/model_check.py) on the tiny models and broken copies of them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from core.settings import Settings, get_settings, load_settings
from core.vocabulary import Role
from reprise.cli import app
from workers.runtime import TinyModelPaths
from workers.runtime.model_check import Check, CheckReport, Probe, Status, check_models, resume_check


def _settings(data_dir: Path, **overrides: Any) -> Settings:
    return load_settings(data_dir=data_dir, device="cpu", model_set="tiny", **overrides)


def _copy(source: Path, tmp_path: Path, name: str) -> Path:
    """A real copy (no symlinks) of a tiny pipeline, to break without touching the shared one."""
    target = tmp_path / name
    shutil.copytree(source, target, symlinks=False)
    return target


def _edit_json(path: Path, **changes: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _checks(report: CheckReport) -> dict[tuple[str, str], Check]:
    return {(check.subject, check.name): check for check in report.checks}


def test_complete_tiny_models_pass_every_check_including_exact_resume(
    tiny_data_dir: Path, tiny_paths: TinyModelPaths
) -> None:
    settings = _settings(
        tiny_data_dir,
        large_model=str(tiny_paths.large),
        small_model=str(tiny_paths.small),
        large_family="sd1",
        small_family="sd1",
    )
    report = check_models(settings, ("large", "small", "decode"))
    checks = _checks(report)
    assert report.ok, report.as_json()
    for role in ("large", "small"):
        for name in ("layout", "family", "scheduler", "resume"):
            assert checks[role, name].status is Status.OK, checks[role, name]
        assert checks[role, "resume"].values["max_abs_diff"] == 0.0
        assert checks[role, "resume"].values["size"] == 64 and checks[role, "resume"].values["k"] == 1
        assert checks[role, "family"].values == {
            "latent_channels": 4,
            "scaling_factor": 0.18215,
            "native_size": 64,
        }
    assert checks["families", "family"].status is Status.OK and "'sd1'" in checks["families", "family"].detail
    assert (
        checks["decode", "decode"].status is Status.OK and "64x64 image" in checks["decode", "decode"].detail
    )
    assert [check.line.split()[0] for check in report.checks] == ["ok"] * len(report.checks)


def test_a_model_without_unet_fails_layout_naming_unet_and_skips_the_run(
    tiny_data_dir: Path, tiny_paths: TinyModelPaths, tmp_path: Path
) -> None:
    broken = _copy(tiny_paths.large, tmp_path, "large")
    shutil.rmtree(broken / "unet")
    report = check_models(_settings(tiny_data_dir, large_model=str(broken)), ("large",))
    checks = _checks(report)
    assert not report.ok
    assert checks["large", "layout"].status is Status.FAIL
    assert "unet/ is missing" in checks["large", "layout"].detail
    assert "hf download" in checks["large", "layout"].detail  # the fix
    assert checks["large", "resume"].status is Status.SKIP


def test_variant_only_weights_fail_since_the_loader_reads_the_default_file(
    tiny_data_dir: Path, tiny_paths: TinyModelPaths, tmp_path: Path
) -> None:
    broken = _copy(tiny_paths.large, tmp_path, "large")
    weights = broken / "unet" / "diffusion_pytorch_model.safetensors"
    weights.rename(weights.with_name("diffusion_pytorch_model.fp16.safetensors"))
    layout = _checks(check_models(_settings(tiny_data_dir, large_model=str(broken)), ("large",)))[
        "large", "layout"
    ]
    assert layout.status is Status.FAIL
    assert "diffusion_pytorch_model.fp16.safetensors" in layout.detail and "no variant" in layout.detail


def test_a_missing_hugging_face_id_says_how_to_download_it(tiny_data_dir: Path) -> None:
    settings = _settings(tiny_data_dir, large_model="reprise-tests/not-a-cached-model")
    layout = _checks(check_models(settings, ("large",)))["large", "layout"]
    assert layout.status is Status.FAIL
    assert "not in the Hugging Face cache" in layout.detail
    assert "hf download reprise-tests/not-a-cached-model --include" in layout.detail


@pytest.mark.parametrize(
    ("file", "changes"),
    [
        ("model_index.json", {"_class_name": "StableDiffusionXLPipeline"}),
        ("unet/config.json", {"addition_embed_type": "text_time"}),
    ],
)
def test_sdxl_like_models_are_refused_with_the_reason(
    tiny_data_dir: Path, tiny_paths: TinyModelPaths, tmp_path: Path, file: str, changes: dict[str, Any]
) -> None:
    model = _copy(tiny_paths.large, tmp_path, "xl")
    _edit_json(model / file, **changes)
    checks = _checks(check_models(_settings(tiny_data_dir, large_model=str(model)), ("large",)))
    assert checks["large", "layout"].status is Status.OK
    assert checks["large", "family"].status is Status.FAIL
    assert (
        "SDXL" in checks["large", "family"].detail
        and "added conditioning" in checks["large", "family"].detail
    )
    assert checks["large", "resume"].status is Status.SKIP


@pytest.mark.parametrize(
    ("vae_changes", "small_fails_alone"),
    [({"latent_channels": 8}, True), ({"scaling_factor": 0.13025}, False)],
)
def test_one_declared_family_with_different_latent_spaces_fails(
    tiny_data_dir: Path,
    tiny_paths: TinyModelPaths,
    tmp_path: Path,
    vae_changes: dict[str, Any],
    small_fails_alone: bool,
) -> None:
    small = _copy(tiny_paths.small, tmp_path, "small")
    _edit_json(small / "vae" / "config.json", **vae_changes)  # configs are read before any weight
    models = {"large_model": str(tiny_paths.large), "small_model": str(small)}
    same = _settings(tiny_data_dir, **models, large_family="sd1", small_family="sd1")
    checks = _checks(check_models(same, ("large", "small")))
    assert checks["families", "family"].status is Status.FAIL
    assert (
        "set REPRISE_SMALL_FAMILY to another name: their latent spaces differ"
        in checks["families", "family"].detail
    )
    # 8 latent channels also break the small model itself (its UNet takes 4); a scaling factor does not
    assert (checks["small", "family"].status is Status.FAIL) is small_fails_alone
    apart = _settings(tiny_data_dir, **models, large_family="sd1", small_family="other")
    assert _checks(check_models(apart, ("large",)))["large", "resume"].status is Status.OK
    pair = _checks(check_models(apart, ("large", "small")))["families", "family"]
    assert pair.status is Status.OK and "different families" in pair.detail


@pytest.mark.parametrize(("hit_policy", "status"), [("resume", Status.FAIL), ("refine", Status.OK)])
def test_a_pipeline_scheduler_that_cannot_resume_exactly_is_refused_under_resume(
    tiny_data_dir: Path, tiny_paths: TinyModelPaths, tmp_path: Path, hit_policy: str, status: Status
) -> None:
    model = _copy(tiny_paths.large, tmp_path, "pndm")
    _edit_json(model / "scheduler" / "scheduler_config.json", _class_name="PNDMScheduler")
    settings = _settings(tiny_data_dir, large_model=str(model), scheduler="pipeline", hit_policy=hit_policy)
    scheduler = _checks(check_models(settings, ("large",)))["large", "scheduler"]
    assert scheduler.status is status
    assert "PNDMScheduler" in scheduler.detail


def test_the_resume_check_measures_the_drift_of_a_multistep_scheduler(tiny_data_dir: Path) -> None:
    settings = _settings(tiny_data_dir, scheduler="dpm++", hit_policy="refine")
    check = resume_check(settings, Role.LARGE, Probe(steps=4, size=None, tolerance=1e-5))
    assert check.values["max_abs_diff"] > 1e-5 and check.values["k"] == 2
    assert check.status is Status.OK and "not exact, not needed" in check.detail  # refine never resumes


@pytest.fixture
def cli_env(tiny_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"DATA_DIR": str(tiny_data_dir), "MODEL_SET": "tiny", "DEVICE": "cpu"}.items():
        monkeypatch.setenv(f"REPRISE_{name}", value)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("cli_env")
def test_cli_passes_on_the_tiny_models_and_writes_the_report(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["models", "check", "--json", str(report_path)])
    assert result.exit_code == 0, result.output
    for role in ("large", "small"):
        assert f"ok    {role:8} resume    2 steps at 64px, resumed at k=1" in result.output
    assert "ok    decode   decode" in result.output and "FAIL" not in result.output
    report = json.loads(report_path.read_text())
    assert report["ok"] is True and {c["status"] for c in report["checks"]} <= {"ok", "skip"}


@pytest.mark.usefixtures("cli_env")
def test_cli_fails_on_a_broken_model(
    tiny_paths: TinyModelPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = _copy(tiny_paths.large, tmp_path, "large")
    shutil.rmtree(broken / "unet")
    monkeypatch.setenv("REPRISE_LARGE_MODEL", str(broken))
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["models", "check", "--role", "large"])
    assert result.exit_code == 1, result.output
    assert "FAIL  large    layout" in result.output and "unet/ is missing" in result.output
    assert "1 check(s) failed" in result.output
