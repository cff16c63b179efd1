"""Benchmark profiles honour the settings they are said to read: nirvana's match predictor."""

from __future__ import annotations

import pytest

from bench.run.profiles import build_profile, settings_mismatches
from core.settings import load_settings


def test_nirvana_runs_its_predictor_unless_the_setting_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPRISE_PREDICTOR_ENABLED", raising=False)
    default = load_settings()
    assert build_profile("nirvana", default).predictor  # NIRVANA 5.2: the paper's design
    assert not build_profile("nirvana-womp", default).predictor
    off = default.model_copy(update={"predictor_enabled": False})
    assert not build_profile("nirvana", off).predictor  # given explicitly: honoured
    assert settings_mismatches(build_profile("nirvana", off), off) == [
        line for line in settings_mismatches(build_profile("nirvana", off), off) if "predictor" not in line
    ]
    monkeypatch.setenv("REPRISE_PREDICTOR_ENABLED", "false")
    assert not build_profile("nirvana", load_settings()).predictor  # the environment variable too
    monkeypatch.setenv("REPRISE_PREDICTOR_ENABLED", "true")
    assert build_profile("nirvana", load_settings()).predictor
    assert not build_profile("nirvana-womp", load_settings()).predictor
