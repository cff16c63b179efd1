"""The plugin registry (core.plugins): plugins of an entry point group are called once, on the first
lookup; a name nobody registered fails naming what is registered and how to add one; a plugin that
fails registers nothing, and the next lookup tries again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from core import plugins
from core.errors import SettingsError
from core.plugins import Registry
from core.settings import Settings, load_settings


class _Point:
    """An entry point whose plugin is `register`."""

    def __init__(self, register: Callable[[Registry], None]) -> None:
        self._register = register

    def load(self) -> Callable[[Registry], None]:
        return self._register


def _plugins(monkeypatch: pytest.MonkeyPatch, *registers: Callable[[Registry], None]) -> list[str]:
    """Make `registers` the group's plugins; the list records each group read."""
    groups: list[str] = []

    def entry_points(*, group: str) -> list[_Point]:
        groups.append(group)
        return [_Point(register) for register in registers]

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    return groups


def _models(registry: Registry) -> None:
    registry.models.add("set:large", lambda settings: Path("/models") / settings.model_set / "large")


def test_plugins_are_called_once_on_the_first_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    groups = _plugins(monkeypatch, _models)
    registry = Registry("test.plugins")
    assert groups == [] and registry.models.factories == {}  # nothing loads before a lookup
    settings = load_settings(model_set="tiny")
    assert registry.build(registry.models, "set:large", settings) == Path("/models/tiny/large")
    assert registry.build(registry.models, "set:large", settings) == Path("/models/tiny/large")
    assert groups == ["test.plugins"]


def test_an_unknown_name_says_what_is_registered_and_how_to_add_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _plugins(monkeypatch, _models)
    registry = Registry("test.plugins")
    with pytest.raises(SettingsError) as refused:
        registry.build(registry.models, "set:huge", load_settings())
    message = str(refused.value)
    assert "no model source named 'set:huge'" in message and "registered: set:large" in message
    assert "'test.plugins' entry point group" in message and "register(registry)" in message
    with pytest.raises(SettingsError, match="registered: none"):
        registry.build(registry.image_scorers, "set", load_settings())


def test_a_failing_plugin_leaves_nothing_half_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(registry: Registry) -> None:
        raise ImportError("a plugin's module is missing")

    groups = _plugins(monkeypatch, _models, broken)
    registry = Registry("test.plugins")
    for _ in range(2):  # tried again, and again no "two plugins register" from the first attempt
        with pytest.raises(ImportError):
            registry.build(registry.models, "set:large", load_settings())
        assert registry.models.factories == {}
    assert len(groups) == 2


def test_two_plugins_may_not_register_one_name(monkeypatch: pytest.MonkeyPatch) -> None:
    _plugins(monkeypatch, _models, _models)
    registry = Registry("test.plugins")
    with pytest.raises(SettingsError, match="two plugins register the model source 'set:large'"):
        registry.build(registry.models, "set:large", load_settings())


def test_the_installed_lab_registers_under_the_names_the_settings_use() -> None:
    """pyproject.toml's entry point reaches lab.registration (the environment installs the project)."""
    registry = Registry()
    settings: Settings = load_settings()
    with pytest.raises(SettingsError, match="registered: lab:large, lab:small, lab:small-b, lab:video"):
        registry.build(registry.models, "lab:huge", settings)
    assert sorted(registry.image_scorers.factories) == ["lab"]
    assert sorted(registry.video_scorers.factories) == ["lab:video"]
    assert sorted(registry.feature_readers.factories) == ["lab"]
    assert sorted(registry.image_embedders.factories) == ["lab:attributes"]
