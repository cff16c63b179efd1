"""The compose files start as they are (Docker does not run here, so they are read as YAML): every pulled
image is pinned to a release, no credential is written in them (each comes from .env, which
.env.example lists), each GPU pool has a GPU of its own and insists on CUDA, the backends restart, and
the defaults are the lab's models in their own latent family. tests/test_docker_compose.py checks the
rest of their structure against the code."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.settings import load_settings
from core.vocabulary import BUILTIN_FAMILIES, GPU_ROLES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
GPU_OVERRIDE = ROOT / "docker-compose.gpu.yml"
BACKENDS = ("postgres", "redis", "minio")
REQUIRED = re.compile(r"\$\{([A-Z_][A-Z0-9_]*):\?[^}]*\}")  # ${VAR:?message}: compose refuses it unset
DEFAULTED = re.compile(r"\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|ACCESS_KEY|BASIC_AUTH|REQUIREPASS|_AUTH$", re.IGNORECASE)
URL_CREDENTIALS = re.compile(r"://(?P<user>[^:/@\s]*):(?P<password>[^@\s]+)@")
PINNED_TAG = re.compile(r"^(RELEASE\.\d{4}-\d{2}-\d{2}T[\d-]+Z|v?\d+\.\d+(\.\d+)?(-[a-z0-9]+)?)$")


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def strings(node: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a compose document with the mapping key it sits under (items of a list: the
    list's key, or the option before them), so a secret passed as `--requirepass <value>` is seen with
    its option."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from strings(value, str(name))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            option = node[index - 1] if index and isinstance(node[index - 1], str) else ""
            before = option if option.startswith("-") else key
            yield from strings(item, before)
    elif isinstance(node, str):
        yield key, node


def literal_secrets(document: dict[str, Any]) -> list[str]:
    """Secret-looking values (by their key or their place in a URL) that are not ${VAR:?...} references
    (an empty value is none: it is how a service is kept from a credential .env holds for another)."""
    found = []
    for key, value in strings(document):
        if SECRET_NAME.search(key.lstrip("-")) and value and not REQUIRED.fullmatch(value):
            found.append(f"{key}: {value}")
        for match in URL_CREDENTIALS.finditer(value):
            if not REQUIRED.fullmatch(match.group("password")):
                found.append(f"{key}: {value}")
    return found


def test_the_secret_check_catches_a_literal_and_spares_a_reference() -> None:
    planted = {
        "services": {
            "db": {"environment": {"POSTGRES_PASSWORD": "reprise", "URL": "postgresql://u:pw@db/x"}},
            "redis": {"command": ["redis-server", "--requirepass", "hunter2"]},
            "ok": {"environment": {"POSTGRES_PASSWORD": "${POSTGRES_PASSWORD:?set in .env}"}},
            "kept-from-it": {"environment": {"MINIO_ROOT_PASSWORD": ""}},
        }
    }
    assert len(literal_secrets(planted)) == 3
    assert literal_secrets({"x": {"URL": "redis://:${REDIS_PASSWORD:?set in .env}@redis:6379/0"}}) == []


@pytest.mark.parametrize("path", [COMPOSE, GPU_OVERRIDE], ids=lambda path: path.name)
def test_no_credential_is_written_in_the_compose_files(path: Path) -> None:
    assert literal_secrets(load(path)) == []


def test_every_required_variable_is_in_env_example_with_a_placeholder() -> None:
    required = set(REQUIRED.findall(COMPOSE.read_text())) | set(REQUIRED.findall(GPU_OVERRIDE.read_text()))
    secrets = {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "MINIO_ROOT_PASSWORD", "REPRISE_FLOWER_BASIC_AUTH"}
    assert secrets <= required
    example = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    assert required <= set(example), required - set(example)
    for name, value in example.items():  # an access key's id names a user: it is no secret
        assert "CHANGE_ME" in value or not SECRET_NAME.search(name) or name.endswith("_ID"), name
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()


def test_pulled_images_are_pinned_to_a_release() -> None:
    services = load(COMPOSE)["services"]
    pulled = {name: service["image"] for name, service in services.items() if "build" not in service}
    assert set(pulled) >= {*BACKENDS, "minio-init", "prometheus", "grafana"}
    for name, image in pulled.items():
        repository, _, tag = image.rpartition(":")
        assert repository and PINNED_TAG.match(tag), f"{name}: {image} is not pinned to a release"
    assert PINNED_TAG.match("RELEASE.2025-04-22T22-12-26Z") and not PINNED_TAG.match("7")
    assert pulled["postgres"].startswith("pgvector/pgvector:") and pulled["postgres"].endswith("-pg17")


def test_each_gpu_pool_has_a_gpu_of_its_own_and_insists_on_cuda() -> None:
    override = load(GPU_OVERRIDE)["services"]
    assert set(override) == {f"worker-{role.value}" for role in GPU_ROLES}
    taken: list[str] = []
    for name, service in override.items():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"], name
        assert "count" not in device, name  # count and device_ids exclude each other
        (index,) = device["device_ids"]
        taken.append(str(index))
        assert service["environment"]["REPRISE_DEVICE"] == "cuda", name
    assert len(set(taken)) == len(taken) and set(taken) == {str(i) for i in range(len(taken))}


def test_backends_restart_and_postgres_has_room() -> None:
    services = load(COMPOSE)["services"]
    for name, service in services.items():
        if name not in ("migrate", "minio-init"):  # one-shot jobs
            assert service.get("restart") == "unless-stopped", name
    postgres = services["postgres"]
    assert postgres["shm_size"] == "1gb"
    assert any(str(arg).startswith("shared_buffers=") for arg in postgres["command"])


def test_the_defaults_are_the_lab_models_in_their_own_family(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing set in .env, the workers get the lab's models and the families those models have
    (a family that names another model set would file every cache entry under the wrong latent space)."""
    environment = load(COMPOSE)["x-reprise-env"]
    for name, value in environment.items():
        defaulted = DEFAULTED.fullmatch(str(value))
        if name.startswith("REPRISE_") and defaulted:
            monkeypatch.setenv(name, defaulted.group(2))
    settings = load_settings()
    assert settings.model_set.value == "lab"
    for role in ("large", "small"):
        source = settings.model_source(role)
        assert getattr(settings, f"{role}_family") == BUILTIN_FAMILIES[source], role


def test_the_readme_shows_how_to_create_a_key_in_compose() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docker compose exec api reprise keys create" in readme
    assert "cp .env.example .env" in readme
