"""Fixtures for the diffusion runtime: the tiny models, built once per session into a temp dir."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from core.settings import Settings, load_settings
from core.vocabulary import ModelSet, Role
from db.engine import session_scope
from db.models import Job, Tenant
from tests.support.dispatch import RecordingDispatcher
from workers.context import WorkerContext
from workers.runtime import DiffusionRuntime, TinyModelPaths, ensure_tiny_models

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may download
# One intra-op thread: the tiny models gain little from two, and when other processes share the
# cores (services, parallel suites) OpenMP threads spinning on a busy core make steps ~10x slower.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data_dir whose models/ holds the built tiny set."""
    data_dir = tmp_path_factory.mktemp("reprise-data")
    ensure_tiny_models(load_settings(data_dir=data_dir, model_set="tiny"))
    return data_dir


@pytest.fixture(scope="session")
def tiny_settings(tiny_data_dir: Path) -> Settings:
    """The tiny random models (REPRISE_MODEL_SET=tiny: the runtime's mechanics, sizes and timings do not
    need models that learned), CPU, data in the temp dir."""
    return load_settings(data_dir=tiny_data_dir, device="cpu", model_set="tiny")


@pytest.fixture(scope="session")
def tiny_paths(tiny_settings: Settings) -> TinyModelPaths:
    return ensure_tiny_models(tiny_settings)


@pytest.fixture(scope="session")
def large(tiny_settings: Settings) -> DiffusionRuntime:
    return DiffusionRuntime(tiny_settings, Role.LARGE)


@pytest.fixture(scope="session")
def small(tiny_settings: Settings) -> DiffusionRuntime:
    return DiffusionRuntime(tiny_settings, Role.SMALL)


# --- task bodies against the real database, with a recording dispatcher ------------------------------


@pytest.fixture
def task_settings(db_settings: Settings, tiny_data_dir: Path, tmp_path: Path, redis_url: str) -> Settings:
    """The test database, the tiny models (the task bodies' mechanics; the lab's models run end to end in
    tests/e2e), blobs in a directory of this test's own."""
    return db_settings.model_copy(
        update={
            "data_dir": tiny_data_dir,
            "blob_dir": tmp_path / "blobs",
            "redis_url": redis_url,  # this run's own database: a decode node publishes its answers there
            "device": "cpu",
            "model_set": ModelSet.TINY,
            "large_family": "tiny-sd",
            "small_family": "tiny-sd",
        }
    )


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def context_for(task_settings: Settings, dispatcher: RecordingDispatcher) -> Callable[[Role], WorkerContext]:
    """A worker context of a role over the test database, its sends recorded (nothing reaches Redis)."""

    def make(role: Role) -> WorkerContext:
        return WorkerContext(task_settings, role, dispatcher=dispatcher)

    return make


def make_tenant(settings: Settings, *, shared_cache: bool = False) -> uuid.UUID:
    with session_scope(settings) as session:
        tenant = Tenant(
            name=f"t-{uuid.uuid4().hex[:10]}",
            webhook_secret="whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=",
            shared_cache=shared_cache,
        )
        session.add(tenant)
        session.flush()
        return tenant.id


def make_job(settings: Settings, tenant_id: uuid.UUID, prompt: str, **columns: Any) -> uuid.UUID:
    """A job row as the API inserts it ('starting', the tiny models' 64x64, T = 50)."""
    with session_scope(settings) as session:
        values: dict[str, Any] = {
            "prompt": prompt,
            "seed": 7,
            "steps": 50,
            "width": 64,
            "height": 64,
            "guidance": 7.5,
            **columns,
        }
        job = Job(tenant_id=tenant_id, **values)
        session.add(job)
        session.flush()
        return job.id
