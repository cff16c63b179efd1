"""`reprise bench video`'s arguments: the default run takes the frames the lab's video judge reads, a
length the judge cannot read is refused with the option that fixes it, and other models keep 16. The
model, the judge and the measurement are stand-ins: this checks what the command hands them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from core.settings import get_settings
from lab.motion import FRAMES
from reprise.cli import app


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """What `bench video` passed to the measurement, with nothing loaded or run."""
    import bench.video.runner
    import lab.models
    import workers.runtime.video

    calls: dict[str, Any] = {}

    def measure_video(settings: Any, pipe: Any, **options: Any) -> str:
        calls.update(options, loaded=pipe)
        return "result"

    monkeypatch.delenv("REPRISE_VIDEO_MODEL", raising=False)
    monkeypatch.delenv("REPRISE_MODEL_SET", raising=False)
    monkeypatch.setattr(workers.runtime.video, "video_model_source", lambda settings: settings.video_model)
    monkeypatch.setattr(workers.runtime.video, "load_video_pipeline", lambda source, **_: f"pipe {source}")
    monkeypatch.setattr(lab.models, "load_video_judge", lambda settings: "judge")
    monkeypatch.setattr(bench.video.runner, "measure_video", measure_video)
    monkeypatch.setattr(bench.video.runner, "format_table", lambda result: f"table of {result}")
    get_settings.cache_clear()
    yield calls
    get_settings.cache_clear()


def test_the_default_run_takes_the_frames_the_lab_video_judge_reads(measured: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["bench", "video"])

    assert result.exit_code == 0, result.output
    assert measured["model"] == "lab:video" and measured["loaded"] == "pipe lab:video"
    assert measured["frames"] == FRAMES == 8
    assert measured["judged"] is not None and measured["judged"].judge == "judge"


def test_a_length_the_judge_cannot_read_is_refused_with_the_fix(measured: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["bench", "video", "--frames", "16"])

    assert result.exit_code == 2
    assert "--frames 8" in result.output and "--model tiny-video" in result.output
    assert "Traceback" not in result.output and not measured  # refused before any model loads


def test_a_model_without_a_judge_keeps_sixteen_frames_or_the_ones_asked(measured: dict[str, Any]) -> None:
    assert CliRunner().invoke(app, ["bench", "video", "--model", "tiny-video"]).exit_code == 0
    assert measured["frames"] == 16 and measured["judged"] is None

    asked = CliRunner().invoke(app, ["bench", "video", "--model", "tiny-video", "--frames", "4"])
    assert asked.exit_code == 0, asked.output
    assert measured["frames"] == 4
