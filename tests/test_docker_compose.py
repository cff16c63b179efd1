"""docker-compose.yml and the Dockerfile cannot run here (no Docker engine): check their structure against
the code, and the monitoring files (deploy/) against both."""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

from core.settings import ENV_PREFIX, Settings
from core.vocabulary import GPU_ROLES, LogFormat, Role

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
    for role in set(Role) - {Role.IO}:
        assert services[f"worker-{role.value}"]["command"] == ["reprise", "worker", "--role", role.value]


def test_maintenance_has_a_consumer_of_its_own_beside_the_deliveries() -> None:
    services = _compose()["services"]
    io = ["reprise", "worker", "--role", "io", "--queues"]
    assert services["worker-io"]["command"] == [*io, "webhooks"]
    assert services["worker-maintenance"]["command"] == [*io, "maintenance"]
    assert services["worker-maintenance"]["healthcheck"] == services["worker-io"]["healthcheck"]


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
    long_running = {name for name in services if name not in ("migrate", "minio-init")}
    for name in long_running - {"postgres", "redis", "minio"}:
        assert services[name].get("restart") == "unless-stopped", name
        assert "healthcheck" in services[name], name
    for role in Role:  # a worker's health is its progress (workers.liveness), not its process
        test = services[f"worker-{role.value}"]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "reprise", "worker-alive"], test
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


# ---- the images: two Dockerfile targets, api (no torch) and worker (CUDA) ------------------------------

ROOT = COMPOSE.parent
DOCKERFILE = ROOT / "Dockerfile"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
WORKERS = {f"worker-{role.value}" for role in Role} | {"worker-maintenance"}
API_IMAGE_SERVICES = {"migrate", "api", "beat", "flower"}


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (KEYWORD, arguments)

    def index(self, keyword: str, needle: str = "") -> list[int]:
        return [i for i, (key, args) in enumerate(self.instructions) if key == keyword and needle in args]


def dockerfile_stages(text: str) -> dict[str, Stage]:
    """The Dockerfile's stages by name, their FROM resolved through the global ARGs."""
    logical = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in filter(None, (raw.strip() for raw in logical.splitlines())):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), " ".join(rest.split())
        if keyword == "ARG" and current is None and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = value
        elif keyword == "FROM":
            base, _, name = rest.partition(" AS ")
            base = re.sub(r"\$\{(\w+)\}", lambda match: args[match.group(1)], base)
            current = stages[name or base] = Stage(name or base, base)
        elif current is not None:
            current.instructions.append((keyword, rest))
    return stages


def _stages() -> dict[str, Stage]:
    return dockerfile_stages(DOCKERFILE.read_text())


def _packages() -> set[str]:
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return {pattern.rstrip("*") for pattern in include["include"]}


def test_the_parser_reads_stages_args_and_continuations() -> None:
    dockerfile = "ARG BASE=python:3.11-slim\n# a comment\nFROM ${BASE} AS one\nRUN a \\\n && b\n"
    stages = dockerfile_stages(dockerfile + "FROM one AS two\nUSER x\n")
    assert stages["one"].base == "python:3.11-slim"
    assert stages["one"].instructions == [("RUN", "a && b")]
    assert stages["two"].base == "one" and stages["two"].index("USER") == [0]


def test_services_build_the_image_of_their_kind() -> None:
    services = _compose()["services"]
    stages = _stages()
    for name, service in services.items():
        if "build" not in service:
            continue
        target = "worker" if name in WORKERS else "api"
        assert service["build"] == {"context": ".", "target": target}, name
        assert service["image"] == f"reprise-{target}:latest", name
        assert target in stages, target
    assert {name for name, service in services.items() if "build" in service} == WORKERS | API_IMAGE_SERVICES


def test_the_api_image_has_no_torch_and_the_worker_image_runs_on_cuda() -> None:
    stages = _stages()
    assert stages["api"].base.startswith("python:3.11"), stages["api"].base
    assert stages["worker"].base.startswith("nvidia/cuda:"), stages["worker"].base
    assert stages["worker"].index("RUN", "python3.11-venv"), "the worker image needs Python 3.11"
    spec = stages["requirements"]
    assert spec.index("RUN", "requirements.py pyproject.toml api > requirements-api.txt")
    assert spec.index("RUN", "requirements.py pyproject.toml worker > requirements-worker.txt")
    for target in ("api", "worker"):
        install = stages[target].index("RUN", f"-r /tmp/spec/requirements-{target}.txt")
        assert install and stages[target].index("RUN", "-c /tmp/spec/requirements.lock"), target
    requirements = _load_requirements_script()
    api = requirements.requirements(ROOT / "pyproject.toml", ["api"])
    worker = requirements.requirements(ROOT / "pyproject.toml", ["worker"])
    assert not any(dep.startswith("torch") for dep in api) and "torch==2.14.1" in worker
    assert set(api) < set(worker)


def _load_requirements_script() -> Any:
    spec = importlib.util.spec_from_file_location("deploy_requirements", ROOT / "deploy" / "requirements.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dependencies_install_before_the_code_is_copied() -> None:
    stages = _stages()
    spec = stages["requirements"]
    assert spec.index("COPY", "pyproject.toml") and spec.index("COPY", "requirements.lock")
    copied = " ".join(args for key, args in spec.instructions if key == "COPY").split()
    assert not set(copied) & _packages(), "the requirements stage must not see the code"
    for target in ("api", "worker"):
        stage = stages[target]
        (manifests,) = stage.index("COPY", "--from=requirements")
        (code,) = stage.index("COPY", "--from=source")
        (install,) = stage.index("RUN", "-r /tmp/spec/")
        assert manifests < install < code < stage.index("RUN", "pip install --no-deps -e .")[0], target
        assert not any(key == "COPY" and "--from" not in args for key, args in stage.instructions), target


def test_the_source_stage_copies_every_package() -> None:
    source = _stages()["source"]
    assert source.base == "scratch"
    copied = {args.split()[0] for key, args in source.instructions if key == "COPY"}
    assert _packages() <= copied, _packages() - copied
    assert source.index("COPY", "pyproject.toml README.md /app/")


def test_each_image_runs_as_an_unprivileged_user() -> None:
    stages = _stages()
    for target, command in (("api", ["reprise", "api"]), ("worker", ["reprise", "worker"])):
        stage = stages[target]
        users = stage.index("USER")
        assert users, target
        user = stage.instructions[users[-1]][1]
        assert user not in ("root", "0") and not user.startswith("0:"), target
        runs = " ".join(args for key, args in stage.instructions if key == "RUN")
        assert re.search(rf"useradd --uid 10001 [^&]*--home-dir /data [^&]*\b{user}\b", runs), target
        assert stage.index("RUN", f"chown {user}:{user} /data"), target
        assert stage.index("ENV", "HF_HUB_OFFLINE=1 REPRISE_DATA_DIR=/data"), target
        assert not stage.index("HEALTHCHECK"), "compose carries the healthchecks"
        (cmd,) = [json.loads(args) for key, args in stage.instructions if key == "CMD"]
        assert cmd[:2] == command, target


def test_the_build_context_keeps_what_the_dockerfile_copies() -> None:
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip()[:1] not in ("", "#")
    ]
    assert {".venv", ".git", ".reprise", ".env", "**/__pycache__"} <= set(ignored)
    sources = [
        path
        for stage in _stages().values()
        for key, args in stage.instructions
        if key == "COPY" and "--from" not in args
        for path in args.split()[:-1]
    ]
    assert "deploy/requirements.py" in sources
    for path in sources:
        parts = Path(path).parts
        prefixes = {"/".join(parts[: i + 1]) for i in range(len(parts))}
        assert not {pattern for pattern in ignored if any(fnmatch(p, pattern) for p in prefixes)}, path
        assert (ROOT / path).exists(), path


# ---- metrics: every metrics listener is scraped, Grafana shows them, logs are JSON ---------------------

METRICS_PORTS = {"REPRISE_METRICS_PORT": "REPRISE_METRICS_ADDRESS"}
METRICS_PORTS["REPRISE_WORKER_METRICS_PORT"] = "REPRISE_WORKER_METRICS_ADDRESS"


def _scrape_targets() -> dict[str, dict[str, dict[str, str]]]:
    """prometheus.yml's jobs -> their targets (host:port) -> the targets' labels."""
    config = yaml.safe_load(PROMETHEUS.read_text())
    assert config["global"]["scrape_interval"] == "15s"
    return {
        job["job_name"]: {
            target: group.get("labels", {}) for group in job["static_configs"] for target in group["targets"]
        }
        for job in config["scrape_configs"]
    }


def _metrics_listeners() -> dict[str, str]:
    """Each compose service with a metrics port in its environment -> host:port as Prometheus reaches it."""
    listeners = {}
    for name, service in _compose()["services"].items():
        environment = service.get("environment", {})
        for port, address in METRICS_PORTS.items():
            if port in environment:
                assert environment[address] == "0.0.0.0", f"{name}: loopback is out of Prometheus's reach"
                assert str(environment[port]) in service.get("expose", []), name
                # pid-named multiprocess files: every container is pid 1, so none may share them
                data = environment["REPRISE_DATA_DIR"]
                assert any(mount.split(":")[0] == f"{data}/prometheus" for mount in service["tmpfs"]), name
                listeners[name] = f"{name}:{environment[port]}"
    return listeners


def test_prometheus_scrapes_the_api_and_every_worker_where_they_listen() -> None:
    services = _compose()["services"]
    listeners = _metrics_listeners()
    assert set(listeners) == WORKERS | {"api"}
    assert services["api"]["environment"]["REPRISE_METRICS_PORT"] == "9000"
    jobs = _scrape_targets()
    assert set(jobs["reprise-api"]) == {listeners["api"]}
    assert set(jobs["reprise-workers"]) == {listeners[name] for name in WORKERS}
    scraped = {target for job, targets in jobs.items() if job.startswith("reprise-") for target in targets}
    assert scraped == set(listeners.values())


def test_worker_targets_are_labelled_by_pool_without_clobbering_the_workers_labels() -> None:
    from prometheus_client.metrics import MetricWrapperBase

    import workers.metrics

    own = {
        label
        for metric in vars(workers.metrics).values()
        if isinstance(metric, MetricWrapperBase)
        for label in metric._labelnames
    }
    assert "role" in own
    for target, labels in _scrape_targets()["reprise-workers"].items():
        assert labels == {"pool": target.split(":")[0].removeprefix("worker-")}, target
        assert not set(labels) & own, f"{target}: would rename the workers' own labels to exported_*"


def test_prometheus_and_grafana_mount_their_configuration() -> None:
    services = _compose()["services"]
    prometheus = services["prometheus"]
    assert prometheus["image"].startswith("prom/prometheus")
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert prometheus["ports"] == ["127.0.0.1:9090:9090"]
    assert "http://127.0.0.1:9090/-/ready" in prometheus["healthcheck"]["test"]
    grafana = services["grafana"]
    assert grafana["image"].startswith("grafana/grafana")
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in grafana["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    provider = _grafana_provider()
    dashboards = mounts[provider["options"]["path"]]
    assert (ROOT / dashboards / "reprise.json").is_file()
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].startswith(
        provider["options"]["path"] + "/"
    )
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")
    assert "http://127.0.0.1:3000/api/health" in grafana["healthcheck"]["test"]
    assert grafana["depends_on"]["prometheus"] == {"condition": "service_healthy"}
    datasources = yaml.safe_load(
        (ROOT / dashboards.replace("dashboards", "provisioning/datasources") / "prometheus.yml").read_text()
    )["datasources"]
    assert [(source["uid"], source["url"]) for source in datasources] == [
        ("prometheus", "http://prometheus:9090")
    ]


def _grafana_provider() -> dict[str, Any]:
    path = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "reprise.yml"
    (provider,) = yaml.safe_load(path.read_text())["providers"]
    assert provider["type"] == "file"
    assert isinstance(provider, dict)
    return provider


def test_every_reprise_service_sets_only_known_settings_and_json_logs() -> None:
    fields = set(Settings.model_fields)
    for name in WORKERS | API_IMAGE_SERVICES:
        environment = _compose()["services"][name]["environment"]
        names = {key.removeprefix(ENV_PREFIX).lower() for key in environment if key.startswith(ENV_PREFIX)}
        assert names <= fields, (name, names - fields)
        assert LogFormat(environment["REPRISE_LOG_FORMAT"]) is LogFormat.JSON, name


def test_every_named_volume_is_declared() -> None:
    compose = _compose()
    used = {
        volume.split(":")[0]
        for service in compose["services"].values()
        for volume in service.get("volumes", [])
        if not volume.startswith((".", "${"))  # a bind mount: a host path, or one .env names
    }
    assert used <= set(compose["volumes"]), used - set(compose["volumes"])


def test_the_gpu_override_changes_nothing_but_the_device_reservation_and_the_device() -> None:
    override = yaml.safe_load((COMPOSE.parent / "docker-compose.gpu.yml").read_text())
    for name, service in override["services"].items():
        assert set(service) == {"deploy", "environment"}, name  # the base file's image and build stay
        assert service["environment"] == {"REPRISE_DEVICE": "cuda"}, name
        assert _compose()["services"][name]["build"]["target"] == "worker", name
