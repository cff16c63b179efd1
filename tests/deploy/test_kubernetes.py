"""deploy/kubernetes without a cluster: each rendering validates against the Kubernetes schemas (and KEDA's
and the Prometheus Operator's CRDs, committed), and the manifests agree with the code: one Deployment
per role running it, GPUs for the GPU roles only, probes on health checks that exist, grace periods
longer than the task time limit, Secrets in the example overlay only, and the security scan recorded
for the manifests as they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from api.waiting import MAX_WAIT_S
from core.settings import Settings, load_settings
from core.vocabulary import GPU_ROLES, Role
from tests.deploy.conftest import EXAMPLE, KUBERNETES, SCAN, by_kind, container, objects_of, render_text

KUBERNETES_VERSION = "1.32"  # the oldest Kubernetes KEDA 2.20 supports
KEDA_SCHEMAS = {
    "ScaledObject": KUBERNETES / "schemas" / "keda.sh_scaledobjects.yaml",
    "TriggerAuthentication": KUBERNETES / "schemas" / "keda.sh_triggerauthentications.yaml",
}
OPERATOR_SCHEMAS = {  # the Prometheus Operator's (the monitoring component)
    "PodMonitor": KUBERNETES / "schemas" / "monitoring.coreos.com_podmonitors.yaml",
    "ServiceMonitor": KUBERNETES / "schemas" / "monitoring.coreos.com_servicemonitors.yaml",
}
CRD_SCHEMAS = {**KEDA_SCHEMAS, **OPERATOR_SCHEMAS}
CRD_VERSIONS = {"keda.sh": "v1alpha1", "monitoring.coreos.com": "v1"}
WORKER_ROLES = tuple(Role)
DEPLOYMENTS = {"api", "beat", "flower", "maintenance", *(role.value for role in Role)}
SECRET_SETTINGS = {
    "REPRISE_DATABASE_URL",
    "REPRISE_REDIS_URL",
    "REPRISE_S3_ACCESS_KEY_ID",
    "REPRISE_S3_SECRET_ACCESS_KEY",
    "REPRISE_FLOWER_BASIC_AUTH",
    "REPRISE_OUTPUT_LINK_KEY",
    "REPRISE_WEBHOOK_SECRET_KEYS",
}
PLACEHOLDER = "CHANGE_ME"
NAMED_SECRETS = {  # the Secrets the pods and KEDA read, and their keys: supplied by the operator
    "reprise-secrets": SECRET_SETTINGS - {"REPRISE_FLOWER_BASIC_AUTH"},
    "reprise-flower": {"REPRISE_FLOWER_BASIC_AUTH"},
    "reprise-keda": {"postgres-connection"},
}


def keda_schema(kind: str) -> dict[str, Any]:
    """The OpenAPI schema of a custom resource (KEDA's, the Prometheus Operator's) at the version used."""
    crd = yaml.safe_load(CRD_SCHEMAS[kind].read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == CRD_VERSIONS[crd["spec"]["group"]]]
    schema = version["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


@pytest.mark.parametrize("entry", SCAN.ENTRY_POINTS)
def test_every_rendered_object_validates_against_its_schema(entry: str, renderings: dict[str, str]) -> None:
    objects = objects_of(renderings[entry])
    kinds = {obj["kind"] for obj in objects}
    assert {
        "Deployment",
        "ScaledObject",
        "ConfigMap",
        "PodDisruptionBudget",
        "PersistentVolumeClaim",
    } <= kinds
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in CRD_SCHEMAS:
            group = yaml.safe_load(CRD_SCHEMAS[obj["kind"]].read_text())["spec"]["group"]
            assert obj["apiVersion"] == f"{group}/{CRD_VERSIONS[group]}", name
            jsonschema.validate(obj, keda_schema(obj["kind"]))
        else:  # strict: a misspelt field is an error, not an ignored key
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        assert obj["kind"] == "Namespace" or obj["metadata"].get("namespace") == "reprise", name


def test_the_schema_checks_catch_a_misspelt_field(manifests: list[dict[str, Any]]) -> None:
    deployment = json.loads(json.dumps(by_kind(manifests, "Deployment")["reprise-large"]))
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 960
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    scaled = json.loads(json.dumps(by_kind(manifests, "ScaledObject")["reprise-large"]))
    scaled["spec"]["maxReplicaCount"] = "eight"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, keda_schema("ScaledObject"))


def test_one_deployment_per_role_runs_that_role(manifests: list[dict[str, Any]]) -> None:
    deployments = by_kind(manifests, "Deployment")
    assert set(deployments) == {f"reprise-{name}" for name in DEPLOYMENTS}
    for role in WORKER_ROLES:
        worker = container(deployments[f"reprise-{role.value}"])
        queues = {Role.IO: ["--queues", "webhooks"]}.get(role, [])  # maintenance: its own Deployment
        assert worker["command"] == ["reprise", "worker", "--role", role.value, *queues], role
        assert worker["image"].startswith("registry.example.com/reprise/reprise-worker:"), role
    for name in ("api", "beat", "flower"):
        assert container(deployments[f"reprise-{name}"])["command"][:2] == ["reprise", name]
    maintenance = container(deployments["reprise-maintenance"])["command"]
    assert maintenance == ["reprise", "worker", "--role", "io", "--queues", "maintenance"]
    for obj in manifests:
        for spec in _pod_specs(obj):
            for each in spec["containers"]:
                assert not each["image"].endswith(":latest") and ":" in each["image"], obj["metadata"]["name"]


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    template = obj.get("spec", {}).get("template", {})
    return [template["spec"]] if "spec" in template else []


def test_gpu_roles_take_one_gpu_each_and_insist_on_cuda(manifests: list[dict[str, Any]]) -> None:
    deployments = by_kind(manifests, "Deployment")
    for name, deployment in deployments.items():
        resources = container(deployment)["resources"]
        gpu = name.removeprefix("reprise-") in {role.value for role in GPU_ROLES}
        for bound in ("requests", "limits"):
            assert resources[bound].get("nvidia.com/gpu") == (1 if gpu else None), (name, bound)
        env = {item["name"]: item.get("value") for item in container(deployment).get("env", [])}
        assert (env.get("REPRISE_DEVICE") == "cuda") is gpu, name


def test_beat_is_a_singleton_that_nothing_scales(manifests: list[dict[str, Any]]) -> None:
    beat = by_kind(manifests, "Deployment")["reprise-beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    targets = {obj["spec"]["scaleTargetRef"]["name"] for obj in by_kind(manifests, "ScaledObject").values()}
    assert "reprise-beat" not in targets
    assert targets == {f"reprise-{role.value}" for role in GPU_ROLES}


def configured(manifests: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The Settings every pod reads: the ConfigMap's variables and the example Secrets', each placeholder
    replaced by a value as an operator would (`reprise` refuses the placeholders themselves)."""
    for name in ("reprise-config",):
        for key, value in by_kind(manifests, "ConfigMap")[name]["data"].items():
            monkeypatch.setenv(key, value)
    for name in ("reprise-secrets", "reprise-flower"):
        for key, value in by_kind(example_secrets(), "Secret")[name]["stringData"].items():
            monkeypatch.setenv(key, value.replace(PLACEHOLDER, "s3cret-from-the-operator"))
    return load_settings()


def example_secrets() -> list[dict[str, Any]]:
    """The placeholder Secrets of overlays/example-secrets, as that overlay renders them."""
    return objects_of(render_text(EXAMPLE))


def test_workers_outlast_the_longest_task_and_stop_warm(
    manifests: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped worker finishes its task (SIGTERM is Celery's warm shutdown, delivered to the worker
    itself: exec form, no shell, no REMAP_SIGTERM) before the kubelet's SIGKILL: the grace period
    exceeds the hard task time limit the pods are configured with."""
    settings = configured(manifests, monkeypatch)
    deployments = by_kind(manifests, "Deployment")
    for role in WORKER_ROLES:
        deployment = deployments[f"reprise-{role.value}"]
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > settings.task_time_limit_s, role
        worker = container(deployment)
        assert worker["command"][0] == "reprise" and "args" not in worker, role
        assert "REMAP_SIGTERM" not in {item["name"] for item in worker.get("env", [])}, role
    api = deployments["reprise-api"]["spec"]["template"]["spec"]
    assert api["terminationGracePeriodSeconds"] > MAX_WAIT_S


def test_probes_use_the_health_checks_that_exist(manifests: list[dict[str, Any]]) -> None:
    from flower.urls import handlers

    from api.routes.health import router
    from reprise.cli import app

    commands = {command.name for command in app.registered_commands}
    paths = {route.path for route in router.routes}  # type: ignore[attr-defined]
    flower_paths = {(h.regex.pattern if hasattr(h, "regex") else h[0]).rstrip("$") for h in handlers}
    deployments = by_kind(manifests, "Deployment")
    api = container(deployments["reprise-api"])
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz" and "/healthz" in paths
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz" and "/readyz" in paths
    config = by_kind(manifests, "ConfigMap")["reprise-config"]["data"]
    metrics_port = int(config["REPRISE_WORKER_METRICS_PORT"])
    for role in WORKER_ROLES:
        worker = container(deployments[f"reprise-{role.value}"])
        for probe in ("startupProbe", "readinessProbe"):
            command = worker[probe]["exec"]["command"]
            assert command[:2] == ["reprise", "ping-worker"] and "ping-worker" in commands, (role, probe)
        # alive by progress, judged by the worker on itself: no broker or database outage restarts it
        liveness = worker["livenessProbe"]["exec"]["command"]
        assert liveness == ["reprise", "worker-alive"] and "worker-alive" in commands, role
        assert [p["containerPort"] for p in worker["ports"] if p["name"] == "metrics"] == [metrics_port]
    maintenance = container(deployments["reprise-maintenance"])
    assert maintenance["livenessProbe"]["exec"]["command"] == ["reprise", "worker-alive"]
    flower = container(deployments["reprise-flower"])
    assert flower["livenessProbe"]["httpGet"]["path"] == "/healthcheck" and "/healthcheck" in flower_paths


def test_flower_listens_off_loopback_only_with_basic_auth(manifests: list[dict[str, Any]]) -> None:
    flower = container(by_kind(manifests, "Deployment")["reprise-flower"])
    assert flower["command"][flower["command"].index("--address") + 1] == "0.0.0.0"
    secrets = [source["secretRef"]["name"] for source in flower["envFrom"] if "secretRef" in source]
    credentials = by_kind(example_secrets(), "Secret")["reprise-flower"]["stringData"][
        "REPRISE_FLOWER_BASIC_AUTH"
    ]
    assert "reprise-flower" in secrets and credentials.count(":") == 1
    deployments = by_kind(manifests, "Deployment")
    others = [container(d) for name, d in deployments.items() if name != "reprise-flower"]
    assert not any("reprise-flower" in json.dumps(each.get("envFrom", [])) for each in others)
    assert by_kind(manifests, "Service")["reprise-flower"]["spec"].get("type", "ClusterIP") == "ClusterIP"


def test_only_the_example_overlay_holds_secrets_and_they_are_placeholders(
    renderings: dict[str, str], manifests: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base names its Secrets and holds none: an apply pushes no placeholder and collides with no
    ExternalSecret's or SealedSecret's Secret of the same name."""
    for entry, text in renderings.items():
        held = {obj["metadata"]["name"] for obj in objects_of(text) if obj["kind"] == "Secret"}
        assert held == (set(NAMED_SECRETS) if entry == EXAMPLE else set()), entry
    secrets = by_kind(example_secrets(), "Secret")
    assert {name: set(secret["stringData"]) for name, secret in secrets.items()} == NAMED_SECRETS
    for name, secret in secrets.items():
        assert "data" not in secret, name  # stringData only: nothing encoded that a reader cannot see
        for key, value in secret["stringData"].items():
            assert PLACEHOLDER in value, (name, key)
    named = {
        source["secretRef"]["name"]
        for deployment in by_kind(manifests, "Deployment").values()
        for each in _all_containers(deployment)
        for source in each.get("envFrom", [])
        if "secretRef" in source
    }
    keda = {
        ref["name"]
        for auth in by_kind(manifests, "TriggerAuthentication").values()
        for ref in auth["spec"]["secretTargetRef"]
    }
    assert named | keda == set(NAMED_SECRETS)
    config = by_kind(manifests, "ConfigMap")["reprise-config"]["data"]
    assert not set(config) & SECRET_SETTINGS
    settings = configured(manifests, monkeypatch)  # every value is one the settings accept
    assert settings.blob_backend.value == "s3" and settings.database_url is not None


def _all_containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_every_pool_and_the_api_have_a_disruption_budget(manifests: list[dict[str, Any]]) -> None:
    budgets = by_kind(manifests, "PodDisruptionBudget")
    for name, deployment in by_kind(manifests, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets.values() if _selects(b, labels)]
        if name in ("reprise-beat", "reprise-flower"):
            assert not covering, name  # a single pod nothing waits on: never block a drain
        else:
            assert len(covering) == 1, name


def _selects(budget: dict[str, Any], labels: dict[str, str]) -> bool:
    return bool(budget["spec"]["selector"]["matchLabels"].items() <= labels.items())


def test_the_security_scan_was_run_on_these_manifests_and_passed(renderings: dict[str, str]) -> None:
    recorded = json.loads((KUBERNETES / "checkov-results.json").read_text())
    assert set(recorded) == set(SCAN.ENTRY_POINTS)
    for entry, text in renderings.items():
        result = recorded[entry]
        assert result["sha256"] == SCAN.digest(text), (
            f"{entry} changed since the scan: run `python deploy/kubernetes/scan.py --checkov <checkov>`"
        )
        assert result["failed"] == [] and result["summary"]["failed"] == 0, result["failed"]
        assert all(waived["reason"].strip() for waived in result["waived"]), entry


def test_the_scan_digest_sees_a_change(renderings: dict[str, str]) -> None:
    text = renderings["deploy/kubernetes"]
    assert SCAN.digest(text) != SCAN.digest(text.replace("terminationGracePeriodSeconds: 960", "x: 1", 1))


def test_schema_sources_are_written_beside_the_schemas() -> None:
    readme = (KUBERNETES / "schemas" / "README.md").read_text()
    for path in KEDA_SCHEMAS.values():
        assert f"https://github.com/kedacore/keda/blob/v2.20.2/config/crd/bases/{path.name}" in readme
    operator = "https://github.com/prometheus-operator/prometheus-operator/blob/v0.93.0/example/prometheus-operator-crd"
    for path in OPERATOR_SCHEMAS.values():
        assert f"{operator}/{path.name}" in readme
        assert (
            yaml.safe_load(path.read_text())["metadata"]["annotations"]["operator.prometheus.io/version"]
            == "0.93.0"
        )
    assert Path(KUBERNETES / "schemas").is_dir()
