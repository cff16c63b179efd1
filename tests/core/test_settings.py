"""Settings validation: bad values fail at start, naming the variable and the fix."""

from __future__ import annotations

import logging

import pytest

from core.errors import SettingsError
from core.settings import Settings, load_settings
from core.vocabulary import BlobBackend


def test_defaults_are_valid_and_follow_the_papers(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REPRISE_STEPS", "REPRISE_CAPTURE_STEPS", "REPRISE_DATABASE_URL", "REPRISE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert settings.steps == 50
    assert settings.capture_steps == [5, 10, 15, 20, 25]
    assert settings.predictor_nu is None  # chosen on held-out data per fit
    assert settings.embedded_database and settings.embedded_redis
    assert settings.sqlalchemy_url.endswith(f":{settings.pg_port}/reprise")


def test_capture_steps_parse_from_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_CAPTURE_STEPS", "20, 5,10,5")
    assert load_settings().capture_steps == [5, 10, 20]


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("REPRISE_STEPS", "many", "REPRISE_STEPS='many'"),
        ("REPRISE_PG_PORT", "80", "REPRISE_PG_PORT='80'"),
        ("REPRISE_DATABASE_URL", "mysql://x", "REPRISE_DATABASE_URL=(hidden: it carries a credential)"),
        ("REPRISE_REDIS_URL", "localhost:6379", "REPRISE_REDIS_URL"),
        ("REPRISE_EVICTION_POLICY", "random", "REPRISE_EVICTION_POLICY='random'"),
        ("REPRISE_CAPTURE_STEPS", "5,0", "REPRISE_CAPTURE_STEPS"),
        ("REPRISE_CAPTURE_STEPS", "5,50", "REPRISE_CAPTURE_STEPS"),
    ],
)
def test_invalid_values_name_the_variable_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert expected in str(caught.value)
    assert "Fix" in str(caught.value) or "set REPRISE_" in str(caught.value)


def test_s3_backend_requires_a_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_BLOB_BACKEND", "s3")
    monkeypatch.delenv("REPRISE_S3_BUCKET", raising=False)
    with pytest.raises(SettingsError, match="REPRISE_S3_BUCKET"):
        load_settings()
    monkeypatch.setenv("REPRISE_S3_BUCKET", "images")
    assert load_settings().blob_backend is BlobBackend.S3


def test_plain_postgresql_url_is_normalised_to_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_DATABASE_URL", "postgresql://u@db:5432/reprise")
    settings = load_settings()
    assert settings.sqlalchemy_url == "postgresql+psycopg://u@db:5432/reprise"
    assert not settings.embedded_database


def test_an_empty_variable_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """docker-compose passes `${REPRISE_LARGE_MODEL:-}` as "" when it is unset: the default applies,
    not a model named ""."""
    monkeypatch.setenv("REPRISE_LARGE_MODEL", "")
    monkeypatch.setenv("REPRISE_PUBLIC_BASE_URL", "")
    settings = load_settings()
    assert settings.large_model is None and settings.public_base_url is None


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({"REPRISE_PG_PORT": "6000", "REPRISE_REDIS_PORT": "6000"}, "REPRISE_PG_PORT or REPRISE_REDIS_PORT"),
        ({"REPRISE_VISIBILITY_TIMEOUT_S": "900"}, "raise REPRISE_VISIBILITY_TIMEOUT_S"),
        ({"REPRISE_LEASE_S": "10", "REPRISE_LEASE_RENEW_S": "6"}, "lower REPRISE_LEASE_RENEW_S"),
        ({"REPRISE_MONITOR_MIN_LARGE": "3", "REPRISE_MONITOR_MAX_LARGE": "2"}, "REPRISE_MONITOR_MAX_LARGE"),
        ({"REPRISE_LARGE_MODEL": "lab:huge"}, "is no built model"),
    ],
)
def test_each_subsystem_refuses_a_combination_that_cannot_work(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], expected: str
) -> None:
    """The checks across fields of one subsystem (services, reliability, pools, models) run at start."""
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=expected):
        load_settings()


def test_a_built_model_brings_its_latent_family(monkeypatch: pytest.MonkeyPatch) -> None:
    for role in ("LARGE", "SMALL"):
        monkeypatch.delenv(f"REPRISE_{role}_MODEL", raising=False)
        monkeypatch.delenv(f"REPRISE_{role}_FAMILY", raising=False)
    monkeypatch.setenv("REPRISE_SMALL_MODEL", "lab:small-b")
    settings = load_settings(model_set="lab")
    assert (settings.large_family, settings.small_family) == ("lab-a", "lab-b")
    assert load_settings(large_model="org/some-model").large_family == "default"


def test_an_unset_video_model_is_the_model_sets_and_names_the_video_family(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REPRISE_VIDEO_MODEL", raising=False)

    lab, tiny = load_settings(model_set="lab"), load_settings(model_set="tiny")
    chosen = load_settings(model_set="tiny", video_model="ali-vilab/text-to-video-ms-1.7b")

    assert (lab.video_model_name, lab.video_family) == ("lab:video", "lab:video")
    assert (tiny.video_model_name, tiny.video_family) == ("tiny-video", "tiny-video")
    assert chosen.video_model_name == chosen.video_family == "ali-vilab/text-to-video-ms-1.7b"


@pytest.mark.parametrize(
    ("field", "value", "default"), [("capture_steps", "0", None), ("steps", "0", "(50)")]
)
def test_a_refused_value_names_its_variable_and_the_default_it_would_get(
    field: str, value: str, default: str | None
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(**{field: value})
    message = str(caught.value)
    assert f"REPRISE_{field.upper()}=" in message and "Unset it for the default" in message
    assert "PydanticUndefined" not in message  # a default made by a factory is not named
    if default is not None:
        assert f"Unset it for the default {default}." in message


def test_a_retired_variable_is_named_at_start_and_otherwise_ignored(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("REPRISE_INTAKE", "orm")  # the API's second intake path, removed
    with caplog.at_level(logging.WARNING, logger="core.settings.api"):
        settings = load_settings()
    assert "intake" not in Settings.model_fields and not hasattr(settings, "intake")
    [warning] = [record.getMessage() for record in caplog.records if "REPRISE_INTAKE" in record.getMessage()]
    assert "no longer read" in warning and "Remove the variable" in warning
    monkeypatch.setenv("REPRISE_INTAKE", "")  # what compose passes for an unset variable: nothing to say
    caplog.clear()
    load_settings()
    assert not [record for record in caplog.records if "REPRISE_INTAKE" in record.getMessage()]
