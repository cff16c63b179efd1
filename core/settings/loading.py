"""The one Settings class, composed of every subsystem's settings, and how a process reads it from
the REPRISE_* environment variables: once, failing at start with a message that names the variable and
the fix."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict

from core.errors import SettingsError
from core.settings.admission import AdmissionSettings
from core.settings.api import ApiSettings
from core.settings.cache import CacheSettings
from core.settings.cascade import CascadeSettings
from core.settings.embedders import EmbedderSettings
from core.settings.lookup import LookupSettings
from core.settings.models import ModelSettings
from core.settings.observability import ObservabilitySettings
from core.settings.pools import PoolSettings
from core.settings.quality import QualitySettings
from core.settings.reads import ReadSettings
from core.settings.reliability import ReliabilitySettings
from core.settings.services import ServiceSettings
from core.settings.video import VideoSettings
from core.settings.webhooks import WebhookSettings

ENV_PREFIX = "REPRISE_"


class Settings(  # the subsystems, in the order docs/configuration.md lists them
    ServiceSettings,
    ApiSettings,
    WebhookSettings,
    ModelSettings,
    EmbedderSettings,
    AdmissionSettings,
    QualitySettings,
    LookupSettings,
    CacheSettings,
    PoolSettings,
    CascadeSettings,
    ReadSettings,
    VideoSettings,
    ReliabilitySettings,
    ObservabilitySettings,
):
    """Configuration of every Reprise process. Environment variables: REPRISE_<FIELD>."""

    model_config = SettingsConfigDict(  # env_ignore_empty: compose passes "" for an unset variable
        env_prefix=ENV_PREFIX, extra="ignore", validate_default=True, env_ignore_empty=True
    )


def describe_validation_error(error: ValidationError) -> str:
    """Turn pydantic's error into lines that name the environment variable and the fix."""
    lines = ["Invalid Reprise settings:"]
    for item in error.errors():
        loc = [str(part) for part in item["loc"] if part != "__root__"]
        msg = item["msg"].removeprefix("Value error, ")
        if loc:
            var = ENV_PREFIX + loc[0].upper()
            field = Settings.model_fields.get(loc[0])
            about = f" {var}: {field.description}" if field is not None and field.description else ""
            default = f" Unset it for the default ({field.default!r})." if field is not None else ""
            lines.append(f"  {var}={item.get('input')!r}: {msg}.{about} Fix: set a valid value.{default}")
        else:
            lines.append(f"  {msg}")
    return "\n".join(lines)


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment; raise SettingsError with a readable message."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
