"""Webhook secrets at rest: the tenants' columns hold them encrypted, so that a database dump, a backup
or a read-only SQL session shows no secret that could sign a tenant's webhooks.

Fernet (AES-128-CBC with an HMAC-SHA256, the `cryptography` package) under the server's keys
(REPRISE_WEBHOOK_SECRET_KEYS, core.server_keys): the first key encrypts, every key decrypts, so a key is
rotated by putting a new one first, re-encrypting (`reprise keys reencrypt`) and then dropping the old
one. A stored value is `fernet:<token>`; a value without the prefix is a secret from before encryption,
read as it is until the encrypted_webhook_secrets migration (or `reprise keys reencrypt`) encrypts it.
The columns' type (`EncryptedSecret`) does this on every write and read, so the code that signs sees
clear secrets only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import Connection, Dialect, Text, text
from sqlalchemy.types import TypeDecorator

from core.errors import SettingsError

CIPHER_PREFIX = "fernet:"

_process_keys: list[bytes] | None = None


def use_keys(keys: Sequence[bytes] | None) -> None:
    """Set the keys this process encrypts and decrypts with; None reads them from the settings again."""
    global _process_keys
    _process_keys = list(keys) if keys is not None else None


def process_keys() -> list[bytes]:
    """The keys of this process: set by use_keys, else the settings' (read once)."""
    global _process_keys
    if _process_keys is None:
        from core.server_keys import webhook_secret_keys  # settings are read on first use, not at import
        from core.settings import get_settings

        _process_keys = webhook_secret_keys(get_settings())
    return _process_keys


def _box(keys: Sequence[bytes]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def seal(secret: str, keys: Sequence[bytes]) -> str:
    """The stored form of a secret, encrypted with the first key."""
    return CIPHER_PREFIX + _box(keys).encrypt(secret.encode()).decode("ascii")


def is_sealed(stored: str) -> bool:
    return stored.startswith(CIPHER_PREFIX)


def opened(stored: str, keys: Sequence[bytes]) -> str:
    """The secret of a stored value; a value from before encryption is returned as it is."""
    if not is_sealed(stored):
        return stored
    try:
        return _box(keys).decrypt(stored.removeprefix(CIPHER_PREFIX).encode()).decode()
    except InvalidToken:
        raise SettingsError(
            "a webhook secret in the database was encrypted with a key this process does not have. Fix: "
            "give every process the same REPRISE_WEBHOOK_SECRET_KEYS, the key that encrypted it included "
            "(a rotation keeps the old key after the new one until `reprise keys reencrypt` has run)"
        ) from None


def resealed(stored: str, keys: Sequence[bytes]) -> str:
    """A stored value encrypted again with the first key (a clear one encrypted for the first time)."""
    return seal(opened(stored, keys), keys)


class EncryptedSecret(TypeDecorator[str]):
    """A text column holding a secret encrypted under this process's keys."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else seal(value, process_keys())

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else opened(str(value), process_keys())


def reencrypt_tenants(connection: Connection, keys: Sequence[bytes]) -> int:
    """Encrypt every tenant's secrets again with the first of `keys` (any of them decrypting), those
    stored in clear for the first time: the last step of a key rotation, and the encrypted_webhook_secrets
    migration. Reads and writes the stored text (plain SQL, past the column type). Returns the rows
    rewritten."""
    rows = connection.execute(text("SELECT id, webhook_secret, previous_webhook_secret FROM tenants")).all()
    for tenant_id, current, previous in rows:
        connection.execute(
            text(
                "UPDATE tenants SET webhook_secret = :current, previous_webhook_secret = :previous "
                "WHERE id = :id"
            ),
            {
                "id": tenant_id,
                "current": resealed(current, keys),
                "previous": None if previous is None else resealed(previous, keys),
            },
        )
    return len(rows)
