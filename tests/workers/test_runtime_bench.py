"""`reprise bench runtime`: the JSON contract and that its numbers come from a real run, with and without
its step-level batching block (`--batch`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from core.settings import Settings, get_settings
from reprise.commands.bench import bench_app
from workers.runtime.batching import BATCH_ATOL

CONTRACT = {
    "large_step_ms": float,
    "small_step_ms": float,
    "decode_ms": float,
    "codec_ratio": float,
    "entry_bytes": int,
    "png_bytes": int,
    "resume_exact": bool,
}


def test_bench_runtime_writes_the_contract_fields(
    tmp_path: Path, tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPRISE_DATA_DIR", str(tiny_settings.data_dir))
    monkeypatch.setenv("REPRISE_DEVICE", "cpu")
    monkeypatch.setenv(
        "REPRISE_MODEL_SET", "tiny"
    )  # the sizes below are the tiny models' (4-channel latents)
    monkeypatch.setenv("REPRISE_STEPS", "10")
    monkeypatch.setenv("REPRISE_CAPTURE_STEPS", "2,5")
    get_settings.cache_clear()
    cli = typer.Typer()
    cli.add_typer(bench_app, name="bench")  # as reprise/cli.py mounts it
    out = tmp_path / "runtime.json"
    try:
        result = CliRunner().invoke(cli, ["bench", "runtime", "--json", str(out), "--repeats", "1"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "large_step_ms" in result.output and "resume_exact" in result.output

    report = json.loads(out.read_text())
    for name, kind in CONTRACT.items():
        assert type(report[name]) is kind, name
    assert report["resume_exact"] is True
    assert report["large_step_ms"] > 0 and report["small_step_ms"] > 0 and report["decode_ms"] > 0
    assert report["codec_ratio"] > 0 and report["png_bytes"] > 0
    # Two captured latents and the final one, each a compressed 4x8x8 float32 array with a header.
    assert 3 * 64 < report["entry_bytes"] < 3 * (4 * 8 * 8 * 4 + 512)
    assert (report["steps"], report["capture_steps"], report["width"]) == (10, [2, 5], 64)


BATCH_ROW = {"images_per_s": float, "step_ms": float, "unet_ms": float, "max_abs_diff": float}


def _invoke_runtime(
    tmp_path: Path, tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch, *args: str
) -> Any:
    monkeypatch.setenv("REPRISE_DATA_DIR", str(tiny_settings.data_dir))
    monkeypatch.setenv("REPRISE_DEVICE", "cpu")
    monkeypatch.setenv("REPRISE_MODEL_SET", "tiny")
    monkeypatch.setenv("REPRISE_STEPS", "6")
    monkeypatch.setenv("REPRISE_CAPTURE_STEPS", "3")
    get_settings.cache_clear()
    cli = typer.Typer()
    cli.add_typer(bench_app, name="bench")
    try:
        return CliRunner().invoke(cli, ["bench", "runtime", "--repeats", "1", *args])
    finally:
        get_settings.cache_clear()


def test_bench_runtime_batch_adds_a_row_per_size_and_the_exactness_beside_the_contract(
    tmp_path: Path, tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "runtime.json"
    result = _invoke_runtime(
        tmp_path,
        tiny_settings,
        monkeypatch,
        "--batch",
        "1,3",
        "--model",
        "small",
        "--operators",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert "batch 3" in result.output and "batch exactness" in result.output
    assert "batch 3 by operator" in result.output
    assert "decode batch 3" in result.output

    report = json.loads(out.read_text())
    for name, kind in CONTRACT.items():  # the costs the simulator reads are still there
        assert type(report[name]) is kind, name
    assert list(report["batch"]) == ["1", "3"] and report["batch_model"] == report["small_model"]
    for row in report["batch"].values():
        assert {name: type(value) for name, value in row.items()} == BATCH_ROW
        assert row["images_per_s"] > 0 and row["step_ms"] >= row["unet_ms"] > 0
    assert report["batch"]["1"]["max_abs_diff"] == 0.0  # a batch of one is generate, bit for bit
    assert report["batch_max_abs_diff"] == max(row["max_abs_diff"] for row in report["batch"].values())
    assert report["batch_exact"] is (report["batch_max_abs_diff"] == 0.0)
    assert report["batch_atol"] == BATCH_ATOL and report["batch_within_atol"] is True
    # where each size's step went, by operator class: the tiny UNet convolves and projects every step
    assert list(report["batch_operators_ms"]) == ["1", "3"]
    for classes in report["batch_operators_ms"].values():
        assert set(classes) == {"convolution", "linear", "attention", "other"}
        assert classes["convolution"] > 0 and classes["linear"] > 0
    assert list(report["decode_batch"]) == ["1", "3"]  # the decode role's one-call decodes, same sizes
    assert all(row["images_per_s"] > 0 and row["decode_ms"] > 0 for row in report["decode_batch"].values())


def test_bench_runtime_without_batch_has_an_empty_batch_block_and_refuses_bad_sizes(
    tmp_path: Path, tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = _invoke_runtime(tmp_path, tiny_settings, monkeypatch, "--batch", "2,0")
    assert refused.exit_code == 2 and "--batch" in refused.output
    out = tmp_path / "runtime.json"
    result = _invoke_runtime(tmp_path, tiny_settings, monkeypatch, "--json", str(out))
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["batch"] == {} and report["batch_max_abs_diff"] is None and report["batch_exact"] is None
    assert report["batch_operators_ms"] == {}
    assert report["decode_batch"] == {}
