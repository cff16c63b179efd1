"""`reprise bench step-cache` (bench.quality.step_cache): its contract, the default it chooses by the
speed-quality curve, and TeaCache's fit written where the runtime reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.quality.step_cache import DROP_BUDGET, bootstrap, choose_default, record_choices
from workers.runtime.step_cache import CHOICES, chosen_setting, teacache_fit


def _run(model: str, setting: str, speedup: float, drop: float, high: float) -> dict[str, Any]:
    return {"model": model, "setting": setting, "speedup": speedup, "drop": drop, "drop_ci95": [0.0, high]}


def test_the_default_is_each_model_s_fastest_setting_within_the_drop_budget() -> None:
    runs = [
        _run("lab:large", "off", 1.0, 0.0, 0.0),
        _run("lab:small", "off", 1.0, 0.0, 0.0),
        _run("lab:large", "deepcache:3", 1.4, 0.004, 0.008),
        _run("lab:small", "deepcache:3", 1.3, 0.002, 0.006),
        _run("lab:large", "teacache:0.4", 2.0, 0.005, 0.009),
        _run("lab:small", "teacache:0.4", 1.9, 0.02, 0.03),  # over the budget on the small model
        _run("lab:large", "deepcache:5", 2.1, 0.006, DROP_BUDGET + 0.001),  # its interval reaches past it
        _run("lab:small", "deepcache:5", 1.2, 0.001, 0.004),
    ]
    assert choose_default(runs) == "large=teacache:0.4,small=deepcache:3"
    agreeing = [run for run in runs if run["setting"] in ("off", "deepcache:3")]
    assert choose_default(agreeing) == "deepcache:3"  # one value for every model
    over = [run for run in runs if run["setting"] in ("off", "teacache:0.4") and run["model"] == "lab:small"]
    assert choose_default(over) == "off"  # no setting within the budget: the cache stays off


def test_auto_runs_the_choices_of_the_committed_sweep(tmp_path: Path) -> None:
    """The recorded choices are the committed sweep's (`reprise bench step-cache --choose`), so what
    `auto` runs cannot drift from the curve in docs/results/step-cache.md."""
    sweep = Path("bench/results/step-cache/sweep.json")
    recorded = record_choices(json.loads(sweep.read_text()), sweep.as_posix(), tmp_path / "choices.json")
    assert recorded == json.loads(CHOICES.read_text())
    assert json.loads((tmp_path / "choices.json").read_text()) == recorded
    chosen = {
        model.replace("-", ":").replace("lab:", ""): record["setting"] for model, record in recorded.items()
    }
    assert choose_default(json.loads(sweep.read_text())["runs"]) == ",".join(
        f"{role}={setting}" for role, setting in sorted(chosen.items())
    )
    assert chosen_setting("lab-large", tmp_path / "choices.json") == recorded["lab-large"]["setting"]
    assert chosen_setting("sd15", tmp_path / "choices.json") is None


def test_a_model_with_no_setting_within_the_budget_records_no_choice(tmp_path: Path) -> None:
    runs = [_run("lab:large", "off", 1.0, 0.0, 0.0), _run("lab:large", "teacache:0.4", 2.0, 0.03, 0.04)]
    runs = [{**run, "prompts": 8} for run in runs]
    assert record_choices({"runs": runs}, "sweep.json", tmp_path / "choices.json") == {}
    assert chosen_setting("lab-large", tmp_path / "choices.json") is None


def test_the_bootstrap_interval_holds_the_mean_and_narrows_with_more_prompts() -> None:
    few = bootstrap([0.0, 0.1, -0.05, 0.02])
    many = bootstrap([0.0, 0.1, -0.05, 0.02] * 50)
    mean = (0.0 + 0.1 - 0.05 + 0.02) / 4
    assert few[0] <= mean <= few[1] and many[0] <= mean <= many[1]
    assert many[1] - many[0] < few[1] - few[0]


@pytest.mark.integration
def test_the_sweep_writes_its_contract_and_the_fit_is_read_by_the_runtime(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    env = os.environ | {"REPRISE_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "reprise", "bench", "step-cache", "--models", "lab:small"]
    command += [
        "--settings",
        "deepcache:3",
        "--prompts",
        "4",
        "--plot",
        str(tmp_path / "c.png"),
        "--json",
        str(out),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [run["setting"] for run in report["runs"]] == ["off", "deepcache:3"]
    off, cached = report["runs"]
    assert off["speedup"] == 1.0 and off["drop"] == 0.0 and cached["prompts"] == 4
    assert set(cached) >= {"model", "setting", "images_per_s", "speedup", "drop", "drop_ci95", "prompts"}
    assert cached["drop_ci95"][0] <= cached["drop"] <= cached["drop_ci95"][1]
    assert report["default"] in ("off", "large=off,small=deepcache:3")  # the large model was not swept
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    bad = subprocess.run(
        [*command[:-2], "--settings", "deepcache:1"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "deepcache:N" in bad.stderr


def test_the_committed_fits_cover_the_lab_models_and_a_missing_one_names_the_command(tmp_path: Path) -> None:
    assert all(len(teacache_fit(model)) == 5 for model in ("lab-large", "lab-small"))
    with pytest.raises(ValueError, match="--fit SOURCE"):
        teacache_fit("lab-large", tmp_path / "none.json")
