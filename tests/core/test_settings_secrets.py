"""Credential settings are SecretStr: neither repr(Settings), nor a dump, nor any settings error (pydantic's
or the one Reprise prints) shows a credential, while the connections still get it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.errors import SettingsError
from core.settings import ENV_PREFIX, Settings, load_settings
from core.settings.credentials import CREDENTIAL_SETTINGS

PASSWORD = "hunter2-Secret_9"
VALID = {
    "database_url": f"postgresql://app:{PASSWORD}@db.internal:5432/reprise",
    "redis_url": f"redis://:{PASSWORD}@redis.internal:6379/0",
    "s3_access_key_id": f"AKIA{PASSWORD}",
    "s3_secret_access_key": PASSWORD,
    "flower_basic_auth": f"ops:{PASSWORD}",
}
INVALID = {
    "database_url": f"mysql://app:{PASSWORD}@db.internal/reprise",
    "redis_url": f"memcached://:{PASSWORD}@redis.internal:6379/0",
}


def test_every_credential_setting_is_covered() -> None:
    assert set(VALID) <= set(CREDENTIAL_SETTINGS)


def test_repr_and_dump_show_no_credential() -> None:
    settings = load_settings(**VALID)
    for shown in (repr(settings), str(settings), settings.model_dump_json()):
        assert PASSWORD not in shown


def test_the_connections_still_get_the_credential() -> None:
    settings = load_settings(**VALID)
    assert settings.sqlalchemy_url == f"postgresql+psycopg://app:{PASSWORD}@db.internal:5432/reprise"
    assert settings.broker_url == VALID["redis_url"]


@pytest.mark.parametrize("name", sorted(INVALID))
def test_an_invalid_value_is_refused_without_echoing_it(name: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(**{name: INVALID[name]})
    message = str(refused.value)
    assert ENV_PREFIX + name.upper() in message and "hidden" in message
    assert PASSWORD not in message and "db.internal" not in message
    with pytest.raises(ValidationError) as raw:
        Settings.model_validate({name: INVALID[name]})
    assert PASSWORD not in str(raw.value) and PASSWORD not in repr(raw.value)


def test_an_invalid_value_from_the_environment_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_PREFIX + "REDIS_URL", f"sentinel://:{PASSWORD}@s1:26379;redis://:{PASSWORD}@s2")
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert PASSWORD not in str(refused.value) and "sentinel://" in str(refused.value)


def test_a_non_credential_setting_still_shows_what_was_given() -> None:
    with pytest.raises(SettingsError, match="REPRISE_PG_PORT=80"):
        load_settings(pg_port=80)
