"""`reprise bench runtime`: the JSON contract and that its numbers come from a real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from core.settings import Settings, get_settings
from reprise.commands.bench import bench_app

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
