"""The settings that carry a credential, and the refusal of the placeholder the deployment examples ship
(`.env.example` and the Kubernetes example Secrets write CHANGE_ME where an operator must put a secret):
a process that starts on it would run with a password anyone can read in this repository."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import SecretStr

PLACEHOLDER = "CHANGE_ME"

# Each credential-carrying setting -> the part of it that is the credential (for the message).
CREDENTIAL_SETTINGS: dict[str, str] = {
    "database_url": "the password in the URL",
    "redis_url": "the password in the URL",
    "s3_access_key_id": "the S3 access key",
    "s3_secret_access_key": "the S3 secret key",
    "flower_basic_auth": "Flower's user:password",
    "metrics_token": "the token /metrics asks for on the API port",
    "output_link_key": "the key that signs output links",
    "webhook_secret_keys": "a key that encrypts webhook secrets",
}


def secret_text(value: SecretStr | str | None) -> str | None:
    """A credential setting's text, for the one call that needs it (a connection, a client): a SecretStr's
    value, or a plain string (a test's `model_copy(update=...)` sets one without validation)."""
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def placeholder_credentials(values: Mapping[str, object]) -> list[str]:
    """The credential settings of `values` (field name -> value) that still hold the placeholder."""
    found = []
    for name in CREDENTIAL_SETTINGS:
        value = values.get(name)
        parts = value if isinstance(value, list) else [value]  # a list: every key of a rotation
        texts = [secret_text(part) for part in parts if isinstance(part, SecretStr | str)]
        if any(text is not None and PLACEHOLDER in text for text in texts):
            found.append(name)
    return found


def placeholder_message(names: list[str], env_prefix: str) -> str:
    """What to tell the operator: each variable, which part of it is the placeholder, and the fix. The
    value itself is never repeated (beside the placeholder, it holds the real host and user names)."""
    lines = [
        f"{env_prefix}{name.upper()} still holds the placeholder {PLACEHOLDER} ({CREDENTIAL_SETTINGS[name]})."
        for name in names
    ]
    lines.append(
        f"Fix: replace each {PLACEHOLDER} with a real credential: in .env for docker compose (then `docker "
        "compose up` again), in the Secret on Kubernetes, or in this shell's environment."
    )
    return "\n  ".join(lines)
