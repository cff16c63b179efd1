"""The GPU script of the step cache's call costs (bench.gpu.step_cache), run as the CI runs it: on the
CPU, with SD 1.5's architecture at the tiny scale."""

from __future__ import annotations

import json
from pathlib import Path

from bench.gpu.step_cache import main


def test_the_dry_run_measures_every_model_s_three_calls_at_both_batches(tmp_path: Path) -> None:
    out = tmp_path / "costs.json"
    assert main(["--device", "cpu", "--scale", "tiny", "--repeats", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["device"] == "cpu"
    assert set(report["models"]) == {"lab:large", "lab:small", "sd15-tiny"}
    for rows in report["models"].values():
        assert [row["jobs"] for row in rows] == [1, 8]
        for row in rows:
            assert min(row["indicator_ms"], row["shallow_ms"], row["full_ms"]) > 0
            assert row["shallow_share"] == round(row["shallow_ms"] / row["full_ms"], 3)
