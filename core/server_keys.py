"""The server's keys as bytes: from the environment (core/settings/keys.py), else from a key file that
the first process on this machine generates under <data_dir>/keys/ (mode 0600), so that `reprise run`,
the tests and every process sharing one data directory agree without configuration. Processes on several
hosts share no data directory: they must be given the keys (the deployment examples ask for them)."""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from core.settings import Settings

KEYS_DIR = "keys"
LINK_KEY_FILE = "output-link.key"
WEBHOOK_SECRET_KEY_FILE = "webhook-secrets.key"
FERNET_INFO = b"reprise webhook secrets at rest v1"  # HKDF's context: this key serves this purpose only


def output_link_key(settings: Settings) -> bytes:
    """The HMAC key that signs output links."""
    if settings.output_link_key is not None:
        return settings.output_link_key.get_secret_value().encode()
    return stored_key(settings.data_dir, LINK_KEY_FILE)


def webhook_secret_keys(settings: Settings) -> list[bytes]:
    """The Fernet keys of webhook secrets at rest, the one that encrypts first."""
    if settings.webhook_secret_keys:
        return [fernet_key(key.get_secret_value().encode()) for key in settings.webhook_secret_keys]
    return [fernet_key(stored_key(settings.data_dir, WEBHOOK_SECRET_KEY_FILE))]


def fernet_key(text: bytes) -> bytes:
    """The Fernet key of a key text: 32 bytes derived by HKDF-SHA256 (RFC 5869), as url-safe base64, so
    that any random text of 32 characters or more is a key, whatever its alphabet."""
    derived = HKDF(algorithm=SHA256(), length=32, salt=None, info=FERNET_INFO).derive(text)
    return base64.urlsafe_b64encode(derived)


def stored_key(data_dir: Path, name: str) -> bytes:
    """The key kept in <data_dir>/keys/<name>: 32 random bytes as url-safe base64 (a Fernet key, and a
    256-bit HMAC key), made on first use. Written to a private temporary file and linked into place, so
    that two processes starting together read one key, never a half-written one."""
    path = data_dir / KEYS_DIR / name
    if path.exists():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = base64.urlsafe_b64encode(secrets.token_bytes(32))
    draft = path.with_name(f".{name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(key + b"\n")
    try:
        os.link(draft, path)  # fails if another process linked its key first: then that one is the key
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return path.read_bytes().strip()
