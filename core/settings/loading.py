"""The one Settings class, composed of every subsystem's settings, and how a process reads it from
the REPRISE_* environment variables: once, failing at start with a message that names the variable and
the fix."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import ValidationError, model_validator
from pydantic_settings import SettingsConfigDict

from core.errors import SettingsError
from core.settings.admission import AdmissionSettings
from core.settings.anonymous import AnonymousSettings
from core.settings.api import ApiSettings
from core.settings.cache import CacheSettings
from core.settings.cascade import CascadeSettings
from core.settings.credentials import CREDENTIAL_SETTINGS, placeholder_credentials, placeholder_message
from core.settings.embedders import EmbedderSettings
from core.settings.keys import KeySettings
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
from core.vocabulary import (
    BUILTIN_VIDEO_MODELS,
    LAB_ATTRIBUTES,
    Allocator,
    HitPolicy,
    LookupMode,
    TextEmbedderKind,
)

ENV_PREFIX = "REPRISE_"


class Settings(  # the subsystems, in the order docs/configuration.md lists them
    ServiceSettings,
    ApiSettings,
    AnonymousSettings,
    WebhookSettings,
    KeySettings,
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
        env_prefix=ENV_PREFIX,
        extra="ignore",
        validate_default=True,
        env_ignore_empty=True,
        hide_input_in_errors=True,  # pydantic's own message would print a refused URL, password included
    )

    @property
    def cohosting(self) -> bool:
        """Whether a small worker also hosts the large model (REPRISE_COHOST as the workers apply it): with
        batching threads, under MoDM's allocator (DiffServe's MILP sets the split between light and heavy
        itself)."""
        return self.cohost and self.max_batch > 1 and self.allocator is Allocator.MODM

    @property
    def video_model_name(self) -> str:
        """The video model in use: the configured one, or the model set's built one."""
        return self.video_model if self.video_model is not None else BUILTIN_VIDEO_MODELS[self.model_set]

    @property
    def video_family(self) -> str:
        """The latent family of the video model's latents: video entries are reused only by it (DESIGN: a
        cache entry is keyed by its model family). The model's name is it: 'lab:video', an id or a
        directory."""
        return self.video_model_name

    @model_validator(mode="after")
    def _refuse_placeholder_credentials(self) -> Settings:
        """No process starts on a credential left at the deployment examples' placeholder."""
        if names := placeholder_credentials({name: getattr(self, name) for name in type(self).model_fields}):
            raise ValueError(placeholder_message(names, ENV_PREFIX))
        return self

    @model_validator(mode="after")
    def _link_life_within_its_cap(self) -> Settings:
        if self.output_link_ttl_s > self.output_link_max_ttl_s:
            raise ValueError(
                f"REPRISE_OUTPUT_LINK_TTL_S ({self.output_link_ttl_s:g}) exceeds "
                f"REPRISE_OUTPUT_LINK_MAX_TTL_S ({self.output_link_max_ttl_s:g}): lower the first or raise "
                "the cap"
            )
        return self

    @model_validator(mode="after")
    def _lab_lookup(self) -> Settings:
        """On the quality lab's models, what is left unset follows MoDM (3.2, 5.1, 5.2): a prompt is looked
        up against cached images, in the lab's attribute space, and a hit refines the cached final latent
        on the small model. There it held the measured drop within NIRVANA's 0.02 while saving about a
        third of the compute, where MiniLM's text lookups with NIRVANA's resume lost 0.03 to 0.05
        (docs/results/quality-lab.md, "The default configuration, measured live"). REPRISE_LOOKUP_MODE=text
        and REPRISE_HIT_POLICY=resume give NIRVANA's."""
        if not self.model_source("large").startswith("lab:"):
            return self
        if "lookup_mode" not in self.model_fields_set:
            self.lookup_mode = LookupMode.TEXT_TO_IMAGE
        image = self.lookup_mode is LookupMode.TEXT_TO_IMAGE
        if image and "hit_policy" not in self.model_fields_set:
            self.hit_policy = HitPolicy.REFINE
        clip_text = self.text_embedder is TextEmbedderKind.OPEN_CLIP  # then open_clip embeds text too
        if image and self.open_clip_model is None and not clip_text:
            self.open_clip_model = LAB_ATTRIBUTES
        return self


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
            default = "" if field is None else " Unset it for the default."
            if field is not None and field.default_factory is None:  # a factory's default is made, not named
                default = f" Unset it for the default ({field.default!r})."
            given = (
                "(hidden: it carries a credential)"
                if loc[0] in CREDENTIAL_SETTINGS
                else repr(item.get("input"))
            )
            lines.append(f"  {var}={given}: {msg}.{about} Fix: set a valid value.{default}")
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
