"""Settings: the configuration of every Reprise process, read from REPRISE_<FIELD> environment
variables, one module per subsystem it configures.

`Settings` (loading.py) inherits every subsystem's fields, so code reads them flat
(`settings.steps`): services (database, broker, blob store), the HTTP API, webhooks, models and
generation, embedders, admission (k selection, match predictor), the quality guard, the lookup index,
the cache (budget, eviction, retention), pools and the monitor, the cascade, reads and decode, video,
tasks and reliability, observability. Every field has a documented default that cites the paper, section or
measurement it comes from; `reference.py` renders them all as docs/configuration.md
(`reprise config docs`).
"""

from core.settings.loading import ENV_PREFIX, Settings, describe_validation_error, get_settings, load_settings

__all__ = ["ENV_PREFIX", "Settings", "describe_validation_error", "get_settings", "load_settings"]
