"""What reaches each compose service (Docker does not run here, so compose's own rules are applied to the
files as YAML): every REPRISE_* setting an operator writes in .env reaches every service that runs Reprise,
whose settings then load (and refuse .env.example copied unchanged); only the API is published beyond
loopback; the app reaches S3 as a user of its own with a policy on its bucket alone; the one-shot jobs
refuse the example's placeholders; and the models come from a read-only mount the docs say how to fill."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import SettingsError
from core.settings import ENV_PREFIX, Settings, load_settings
from core.settings.credentials import PLACEHOLDER, secret_text

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
GPU_OVERRIDE = ROOT / "docker-compose.gpu.yml"
ENV_EXAMPLE = ROOT / ".env.example"
# KEY=value, or `# KEY=value`: a line an operator uncomments (the optional settings .env.example offers).
ENV_LINE = re.compile(r"^#?\s*([A-Z_][A-Z0-9_]*)=(\S*)$")
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::([?-])([^}]*))?\}")
MODELS_MOUNT = "${MODELS_DIR:-./models}:/models:ro"


def services() -> dict[str, dict[str, Any]]:
    """docker-compose.yml's services with the GPU file's environment merged in, as `-f ... -f` does."""
    base = yaml.safe_load(COMPOSE.read_text())["services"]
    for name, service in yaml.safe_load(GPU_OVERRIDE.read_text())["services"].items():
        base[name]["environment"] = {**base[name].get("environment", {}), **service.get("environment", {})}
    assert isinstance(base, dict)
    return base


def operator_env() -> dict[str, str]:
    """.env as an operator writes it from .env.example: every variable, the optional ones uncommented, each
    placeholder replaced by a value of its own (so that two variables swapped would show)."""
    env = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if match := ENV_LINE.match(line.strip()):
            name, value = match.groups()
            env[name] = value.replace(PLACEHOLDER, f"real-{name.lower().replace('_', '-')}")
    return env


def copied_env() -> dict[str, str]:
    """.env as `cp .env.example .env` leaves it: the variables it sets, placeholders and all."""
    lines = ENV_EXAMPLE.read_text().splitlines()
    matches = [ENV_LINE.match(line) for line in lines if not line.startswith("#")]
    return {match.group(1): match.group(2) for match in matches if match}


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message}, and $$ (a literal $)."""

    def one(match: re.Match[str]) -> str:
        name, kind, rest = match.groups()
        if env.get(name):
            return env[name]
        assert kind != "?", f"{name} is required and unset"
        return rest if kind == "-" else ""

    return "$".join(INTERPOLATION.sub(one, part) for part in value.split("$$"))


def container_env(service: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """A service's environment as compose builds it: its env_file's variables, then `environment:`."""
    files = service.get("env_file", [])
    files = [files] if isinstance(files, str) else files
    assert files in ([], [".env"]), files
    resolved = dict(env) if files else {}
    for name, value in service.get("environment", {}).items():
        resolved[name] = interpolate(str(value), env)
    return resolved


def runs_reprise(service: dict[str, Any]) -> bool:
    """A service of this project's images: every one runs a `reprise` command, which reads the settings."""
    return "build" in service


def test_the_operator_env_and_the_resolution_read_what_they_should() -> None:
    env = operator_env()
    assert env["POSTGRES_PASSWORD"] == "real-postgres-password" and "REPRISE_TEXT_EMBEDDER" in env
    assert interpolate("a:${X:-d}:${Y:?no}:$$Z", {"Y": "y"}) == "a:d:y:$Z"
    with pytest.raises(AssertionError):
        interpolate("${Y:?set in .env}", {})
    without_env_file = container_env({"environment": {"A": "${B}"}}, {"B": "b", "C": "c"})
    assert without_env_file == {"A": "b"}


def test_every_reprise_variable_of_env_example_is_a_setting() -> None:
    names = [name for name in operator_env() if name.startswith(ENV_PREFIX)]
    assert len(names) >= 15, names
    unknown = [name for name in names if name.removeprefix(ENV_PREFIX).lower() not in Settings.model_fields]
    assert unknown == []


def test_every_reprise_variable_in_env_reaches_every_service_that_runs_reprise() -> None:
    """Each service of the project's images loads the whole Settings class (the API, beat, Flower, migrate
    and each worker role read models, embedders, S3...), so each must see each REPRISE_* of .env with
    .env's value: nothing under `environment:` may replace it."""
    env = operator_env()
    settings = {name: value for name, value in env.items() if name.startswith(ENV_PREFIX)}
    reprise_services = {name: service for name, service in services().items() if runs_reprise(service)}
    assert {"api", "migrate", "beat", "flower", "worker-large", "worker-small"} <= set(reprise_services)
    for name, service in reprise_services.items():
        resolved = container_env(service, env)
        lost = {var: resolved.get(var) for var, value in settings.items() if resolved.get(var) != value}
        assert lost == {}, f"{name}: .env's settings do not reach it"


def test_compose_only_settings_are_settings_and_keep_the_app_from_root_credentials() -> None:
    env = operator_env()
    for name, service in services().items():
        if not runs_reprise(service):
            continue
        resolved = container_env(service, env)
        for var in (var for var in service.get("environment", {}) if var.startswith(ENV_PREFIX)):
            assert var.removeprefix(ENV_PREFIX).lower() in Settings.model_fields, (name, var)
        assert resolved["REPRISE_DATABASE_URL"].endswith(f":{env['POSTGRES_PASSWORD']}@postgres:5432/reprise")
        assert resolved["REPRISE_S3_ACCESS_KEY_ID"] != env["MINIO_ROOT_USER"], name
        assert env["MINIO_ROOT_PASSWORD"] not in resolved.values(), f"{name} carries MinIO's root password"
        assert env["GRAFANA_ADMIN_PASSWORD"] not in resolved.values(), f"{name} carries Grafana's password"


def test_only_the_api_is_published_beyond_loopback() -> None:
    published = {name: service["ports"] for name, service in services().items() if "ports" in service}
    assert published.pop("api") == ["8000:8000"]
    assert set(published) >= {"flower", "prometheus", "grafana"}
    for name, ports in published.items():
        assert all(str(port).startswith("127.0.0.1:") for port in ports), (name, ports)


def run_script(script: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """A service's shell script as its container would run it, with `mc` a stub that records its calls."""
    (tmp_path / "mc").write_text('#!/bin/sh\necho "mc $*" >> "$MC_LOG"\n')
    (tmp_path / "mc").chmod(0o755)
    text = script.replace("$$", "$").replace("/tmp/", f"{tmp_path}/").replace("exec /run.sh", "exec true")
    path = f"{tmp_path}:{os.environ['PATH']}"
    environment = {**env, "PATH": path, "MC_LOG": str(tmp_path / "mc.log")}
    return subprocess.run(["sh", "-euc", text], env=environment, capture_output=True, text=True, timeout=30)


def minio_init_env(env: dict[str, str]) -> dict[str, str]:
    return container_env(services()["minio-init"], env)


def test_minio_init_gives_the_app_a_user_scoped_to_its_bucket(tmp_path: Path) -> None:
    env = operator_env()
    service = services()["minio-init"]
    (script,) = service["command"]
    done = run_script(script, minio_init_env(env), tmp_path)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "mc.log").read_text().splitlines()
    user, secret = env["REPRISE_S3_ACCESS_KEY_ID"], env["REPRISE_S3_SECRET_ACCESS_KEY"]
    assert f"mc admin user add s3 {user} {secret}" in calls
    assert calls[-1] == f"mc admin policy attach s3 reprise-app --user {user}"
    bucket = yaml.safe_load(COMPOSE.read_text())["x-reprise-env"]["REPRISE_S3_BUCKET"]
    assert f"mc mb -p s3/{bucket}" in calls
    policy = json.loads((tmp_path / "policy.json").read_text())
    resources = {resource for statement in policy["Statement"] for resource in statement["Resource"]}
    assert resources == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"}
    actions = {action for statement in policy["Statement"] for action in statement["Action"]}
    assert not [action for action in actions if "*" in action or action.startswith("s3:CreateBucket")]


@pytest.mark.parametrize(
    ("variable", "value"), [("MINIO_ROOT_PASSWORD", PLACEHOLDER), ("REPRISE_S3_ACCESS_KEY_ID", "minio-root")]
)
def test_minio_init_refuses_the_placeholder_and_the_root_user(
    variable: str, value: str, tmp_path: Path
) -> None:
    env = {**operator_env(), variable: value, "MINIO_ROOT_USER": "minio-root"}
    (script,) = services()["minio-init"]["command"]
    done = run_script(script, minio_init_env(env), tmp_path)
    assert done.returncode == 2 and variable in done.stderr
    assert not (tmp_path / "mc.log").exists(), "nothing may reach MinIO first"


@pytest.mark.parametrize(("password", "code"), [(PLACEHOLDER, 2), ("real-one", 0)])
def test_grafana_refuses_the_placeholder_admin_password(password: str, code: int, tmp_path: Path) -> None:
    grafana = services()["grafana"]
    assert grafana["entrypoint"][:2] == ["/bin/sh", "-c"]
    env = container_env(grafana, {**operator_env(), "GRAFANA_ADMIN_PASSWORD": password})
    done = run_script(grafana["entrypoint"][2], env, tmp_path)
    assert done.returncode == code, done.stderr
    assert ("placeholder" in done.stderr) == (code == 2)


def test_workers_read_models_from_a_read_only_mount_the_docs_explain() -> None:
    for name, service in services().items():
        if runs_reprise(service) and name != "migrate":  # migrate reads the schema, not models
            assert MODELS_MOUNT in service["volumes"], name
            assert service["environment"]["HF_HUB_CACHE"].startswith("/models/"), name
    for page in (COMPOSE, ENV_EXAMPLE, ROOT / "README.md"):
        text = page.read_text()
        assert "reprise models check" in text and "MODELS_DIR" in text, page.name


def reprise_settings_of(
    service: dict[str, Any], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The Settings a service's process reads: its resolved REPRISE_* variables, and nothing else's."""
    for name in [name for name in os.environ if name.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in container_env(service, env).items():
        if name.startswith(ENV_PREFIX):
            monkeypatch.setenv(name, value)
    return load_settings()


def test_each_reprise_service_reads_valid_settings_and_refuses_the_example_as_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With .env filled in, every service's settings load, with what a worker needs (Postgres, Redis, the S3
    user, .env's models); with .env.example copied unchanged, every one of them refuses to start."""
    assert PLACEHOLDER in copied_env()["REPRISE_S3_SECRET_ACCESS_KEY"]
    for name, service in services().items():
        if not runs_reprise(service):
            continue
        settings = reprise_settings_of(service, operator_env(), monkeypatch)
        assert settings.database_url and settings.redis_url and settings.s3_bucket == "reprise", name
        assert (
            secret_text(settings.s3_access_key_id) == "reprise-app" and settings.large_model == "/models/sd15"
        ), name
        with pytest.raises(SettingsError, match="placeholder"):
            reprise_settings_of(service, copied_env(), monkeypatch)
