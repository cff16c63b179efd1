"""The server's keys: the environment's when set, else one key per purpose kept under the data directory,
private to its owner, the same for every process that shares the directory; bad keys refused at start."""

from __future__ import annotations

import base64
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from core.errors import SettingsError
from core.server_keys import fernet_key, output_link_key, stored_key, webhook_secret_keys
from core.settings import load_settings


def test_unset_keys_are_made_once_under_the_data_directory(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    link, secrets = output_link_key(settings), webhook_secret_keys(settings)
    assert len(base64.urlsafe_b64decode(link)) == 32 and link != secrets[0]
    assert output_link_key(load_settings(data_dir=tmp_path)) == link  # another process, the same key
    assert webhook_secret_keys(load_settings(data_dir=tmp_path)) == secrets
    Fernet(secrets[0])  # a valid Fernet key
    for path in (tmp_path / "keys").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_processes_starting_together_agree_on_one_key(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: stored_key(tmp_path, "race.key"), range(32)))
    assert len(keys) == 1 and [path.name for path in (tmp_path / "keys").iterdir()] == ["race.key"]


def test_the_environments_keys_win_in_their_order(tmp_path: Path) -> None:
    new, old = "n" * 32, "o" * 44  # any text of 32 characters or more: a Fernet key is derived from it
    settings = load_settings(data_dir=tmp_path, webhook_secret_keys=f"{new}, {old}", output_link_key="x" * 40)
    derived = webhook_secret_keys(settings)
    assert derived == [fernet_key(new.encode()), fernet_key(old.encode())] and derived[0] != derived[1]
    Fernet(derived[0]).decrypt(Fernet(derived[0]).encrypt(b"a secret"))
    assert output_link_key(settings) == b"x" * 40
    assert not (tmp_path / "keys").exists()
    assert new not in repr(settings) and "x" * 40 not in repr(settings)


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"webhook_secret_keys": "not-a-key"}, "REPRISE_WEBHOOK_SECRET_KEYS"),
        ({"webhook_secret_keys": f"{'k' * 32},short-second-key"}, "key 2 is shorter than 32 characters"),
        ({"output_link_key": "short-key"}, "at least 32 characters"),
        ({"output_link_ttl_s": 7200, "output_link_max_ttl_s": 3600}, "REPRISE_OUTPUT_LINK_MAX_TTL_S"),
    ],
)
def test_bad_keys_and_caps_are_refused_without_echoing_them(overrides: dict[str, object], said: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(**overrides)
    assert said in str(refused.value)
    for value in overrides.values():
        if isinstance(value, str):
            assert value not in str(refused.value)
