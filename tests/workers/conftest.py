"""Fixtures for the diffusion runtime: the tiny models, built once per session into a temp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from core.settings import Settings, load_settings
from core.vocabulary import Role
from workers.runtime import DiffusionRuntime, TinyModelPaths, ensure_tiny_models

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may download
# One intra-op thread: the tiny models gain little from two, and when other processes share the
# cores (services, parallel suites) OpenMP threads spinning on a busy core make steps ~10x slower.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data_dir whose models/ holds the built tiny set."""
    data_dir = tmp_path_factory.mktemp("reprise-data")
    ensure_tiny_models(load_settings(data_dir=data_dir))
    return data_dir


@pytest.fixture(scope="session")
def tiny_settings(tiny_data_dir: Path) -> Settings:
    """Default settings (no model configured, so the tiny ones), CPU, data in the temp dir."""
    return load_settings(data_dir=tiny_data_dir, device="cpu")


@pytest.fixture(scope="session")
def tiny_paths(tiny_settings: Settings) -> TinyModelPaths:
    return ensure_tiny_models(tiny_settings)


@pytest.fixture(scope="session")
def large(tiny_settings: Settings) -> DiffusionRuntime:
    return DiffusionRuntime(tiny_settings, Role.LARGE)


@pytest.fixture(scope="session")
def small(tiny_settings: Settings) -> DiffusionRuntime:
    return DiffusionRuntime(tiny_settings, Role.SMALL)
