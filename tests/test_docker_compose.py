"""docker-compose.yml cannot run here (no Docker engine): check its structure against the code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from core.settings import ENV_PREFIX, Settings
from core.vocabulary import GPU_ROLES, Role

COMPOSE = Path(__file__).resolve().parents[1] / "docker-compose.yml"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def test_every_pool_and_infrastructure_service_is_declared() -> None:
    services = _compose()["services"]
    expected = {"postgres", "redis", "minio", "migrate", "api", "beat", "flower"}
    expected |= {f"worker-{role.value}" for role in Role}
    assert expected <= set(services)
    assert services["postgres"]["image"].startswith("pgvector/pgvector")


def test_each_worker_runs_its_role() -> None:
    services = _compose()["services"]
    for role in Role:
        assert services[f"worker-{role.value}"]["command"] == ["reprise", "worker", "--role", role.value]


def test_settings_variables_exist_in_the_settings_class() -> None:
    environment = _compose()["services"]["api"]["environment"]
    names = {name.removeprefix(ENV_PREFIX).lower() for name in environment if name.startswith(ENV_PREFIX)}
    assert names, "the api service carries no REPRISE_ settings"
    assert names <= set(Settings.model_fields), names - set(Settings.model_fields)
    assert {"database_url", "redis_url", "blob_backend", "s3_bucket", "s3_endpoint_url"} <= names


def test_stateful_services_have_healthchecks_and_volumes() -> None:
    services = _compose()["services"]
    for name in ("postgres", "redis", "minio", "api"):
        assert "healthcheck" in services[name], name
    assert set(_compose()["volumes"]) >= {"pgdata", "redisdata", "miniodata"}


def test_every_long_running_service_restarts_and_has_a_meaningful_healthcheck() -> None:
    services = _compose()["services"]
    long_running = {name for name in services if name not in ("migrate", "create-bucket")}
    for name in long_running - {"postgres", "redis", "minio"}:
        assert services[name].get("restart") == "unless-stopped", name
        assert "healthcheck" in services[name], name
    for role in Role:  # a worker's health is its answer over the broker, not its process
        test = services[f"worker-{role.value}"]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "reprise", "ping-worker"], test
    flower = services["flower"]
    assert "--address" in flower["command"] and "REPRISE_FLOWER_BASIC_AUTH" in flower["environment"]


def test_the_gpu_override_reserves_a_gpu_for_each_gpu_pool_only() -> None:
    override = yaml.safe_load((COMPOSE.parent / "docker-compose.gpu.yml").read_text())
    reserved = {
        name
        for name, service in override["services"].items()
        if service["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    }
    assert reserved == {f"worker-{role.value}" for role in GPU_ROLES}
    assert reserved <= set(_compose()["services"])


def test_clients_get_absolute_urls() -> None:
    environment = _compose()["services"]["api"]["environment"]
    assert environment["REPRISE_PUBLIC_BASE_URL"].startswith("${REPRISE_PUBLIC_BASE_URL:-http")
