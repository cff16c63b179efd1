"""Settings validation: bad values fail at start, naming the variable and the fix."""

from __future__ import annotations

import pytest

from core.errors import SettingsError
from core.settings import load_settings
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
        ("REPRISE_DATABASE_URL", "mysql://x", "REPRISE_DATABASE_URL='mysql://x'"),
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
