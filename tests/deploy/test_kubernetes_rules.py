"""The rules the Kubernetes manifests follow, checked on the rendered objects: the models volume on every
pod that loads a model, the schema first (no Deployment's process starts before the database is at the
code's head), GPU pods the cluster autoscaler leaves alone, metrics and Flower reachable from the
monitoring namespace only, and every environment variable a manifest sets read by the settings."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from core.settings import Settings
from core.vocabulary import GPU_ROLES, Role
from tests.deploy.conftest import EXAMPLE, by_kind, container, objects_of
from tests.deploy.test_kubernetes import configured

MODELS_CLAIM = "reprise-models"
MODEL_PODS = {*(f"reprise-{role.value}" for role in GPU_ROLES), "reprise-admit"}  # admit embeds prompts
# Variables a manifest may set that are not REPRISE_ settings, each with the library that reads it.
FOREIGN_VARIABLES = {"HF_HOME": "huggingface_hub: where the Hugging Face cache (open_clip's weights) is"}
MONITORING_NAMESPACE = "monitoring"
METRICS_AND_FLOWER_PORTS = {9000, 9100, 5555}
CLUSTER_AUTOSCALER_GRACE_CAP_S = 600  # its --max-graceful-termination-sec default


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    spec = deployment["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def test_pods_that_load_models_mount_the_models_volume_read_only(manifests: list[dict[str, Any]]) -> None:
    claim = by_kind(manifests, "PersistentVolumeClaim")[MODELS_CLAIM]
    assert claim["spec"]["accessModes"] in (["ReadWriteMany"], ["ReadOnlyMany"])  # pods on many nodes
    mounted = {}
    for name, deployment in by_kind(manifests, "Deployment").items():
        volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
        claims = [
            v for v in volumes.values() if v.get("persistentVolumeClaim", {}).get("claimName") == MODELS_CLAIM
        ]
        if name not in MODEL_PODS:
            assert not claims, name
            continue
        (volume,) = claims
        assert volume["persistentVolumeClaim"]["readOnly"] is True, name
        (mount,) = [m for m in container(deployment)["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True, name
        mounted[name] = mount["mountPath"]
    assert set(mounted) == MODEL_PODS and len(set(mounted.values())) == 1
    (models_dir,) = set(mounted.values())
    config = by_kind(manifests, "ConfigMap")["reprise-config"]["data"]
    named = [config[key] for key in ("REPRISE_LARGE_MODEL", "REPRISE_SMALL_MODEL", "HF_HOME")]
    assert all(PurePosixPath(models_dir) in PurePosixPath(path).parents for path in named), named


def test_the_configmap_names_models_the_settings_accept(
    manifests: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = configured(manifests, monkeypatch)
    assert settings.model_source("large") == "/models/sd15" and settings.large_family == settings.small_family
    assert settings.text_embedding_dim == 768  # CLIP ViT-L/14's: the vector column is sized from it


def test_no_deployment_starts_before_the_schema(manifests: list[dict[str, Any]]) -> None:
    """Each Deployment's pods first wait, in an init container, until `reprise migrate --check` finds the
    database at the code's head (the reprise-migrate Job applies it), reading the same settings."""
    from reprise.commands.services import migrate_command

    options = {param.opts[0] for param in _params(migrate_command)}
    assert {"--check", "--wait"} <= options
    (job,) = by_kind(manifests, "Job").values()
    job_sources = container(job)["envFrom"]
    assert container(job)["command"] == ["reprise", "migrate"]
    for name, deployment in by_kind(manifests, "Deployment").items():
        inits = pod_spec(deployment).get("initContainers", [])
        assert [each["name"] for each in inits] == ["wait-for-schema"], name
        (init,) = inits
        command = init["command"]
        assert command[:3] == ["reprise", "migrate", "--check"], name
        assert float(command[command.index("--wait") + 1]) > 0, name
        assert init["envFrom"] == job_sources, name  # the same database, the same embedding dimensions
        assert init["volumeMounts"] == container(job)["volumeMounts"], name  # writable where the Job's is
        assert init["image"] == container(deployment)["image"], name  # no second image to pull


def _params(command: Any) -> list[Any]:
    import typer.main

    return typer.main.get_command_from_info(
        typer.models.CommandInfo(callback=command), pretty_exceptions_short=True, rich_markup_mode=None
    ).params


def test_gpu_pods_are_not_evicted_by_the_cluster_autoscaler(manifests: list[dict[str, Any]]) -> None:
    deployments = by_kind(manifests, "Deployment")
    for name, deployment in deployments.items():
        annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
        safe = annotations.get("cluster-autoscaler.kubernetes.io/safe-to-evict")
        gpu = name.removeprefix("reprise-") in {role.value for role in GPU_ROLES}
        assert safe == ("false" if gpu else None), name
        if gpu:  # why: its grace exceeds what the autoscaler waits before killing it
            assert pod_spec(deployment)["terminationGracePeriodSeconds"] > CLUSTER_AUTOSCALER_GRACE_CAP_S


def test_metrics_and_flower_are_reachable_from_the_monitoring_namespace_only(
    manifests: list[dict[str, Any]],
) -> None:
    policies = by_kind(manifests, "NetworkPolicy")
    assert policies["reprise-deny-ingress"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    seen = set()
    for policy in policies.values():
        for rule in policy["spec"].get("ingress", []):
            ports = {port["port"] for port in rule["ports"]}
            if ports & METRICS_AND_FLOWER_PORTS:
                assert rule["from"] == [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}
                        }
                    }
                ], policy["metadata"]["name"]
                seen |= ports
            else:
                assert ports == {8000}, policy["metadata"]["name"]  # the API itself: any client
    assert seen == METRICS_AND_FLOWER_PORTS
    decode = by_kind(manifests, "ScaledObject")["reprise-decode"]["spec"]["triggers"][0]
    assert f".{MONITORING_NAMESPACE}.svc" in decode["metadata"]["serverAddress"]  # where Prometheus runs


def set_variables(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Every environment variable a pod of these manifests gets: its containers' env, and the keys of the
    ConfigMaps and Secrets they read whole (envFrom). Variable -> where it is set."""
    config_maps, secrets = by_kind(objects, "ConfigMap"), by_kind(objects, "Secret")
    found: dict[str, str] = {}
    for obj in objects:
        spec = obj.get("spec", {}).get("template", {}).get("spec")
        if spec is None:
            continue
        for each in [*spec.get("initContainers", []), *spec["containers"]]:
            where = f"{obj['metadata']['name']}/{each['name']}"
            found.update({item["name"]: where for item in each.get("env", [])})
            for source in each.get("envFrom", []):
                if "configMapRef" in source:
                    found.update(dict.fromkeys(config_maps[source["configMapRef"]["name"]]["data"], where))
                elif source["secretRef"]["name"] in secrets:  # else supplied outside (the example has them)
                    found.update(dict.fromkeys(secrets[source["secretRef"]["name"]]["stringData"], where))
    return found


def test_every_variable_a_manifest_sets_is_a_setting(renderings: dict[str, str]) -> None:
    """A misspelt or retired REPRISE_ variable would be ignored in silence (the settings ignore unknown
    variables): each must name a field of the settings class."""
    fields = set(Settings.model_fields)
    for entry, text in renderings.items():
        variables = set_variables(objects_of(text))
        assert len(variables) >= 20, entry
        for variable, where in variables.items():
            if variable in FOREIGN_VARIABLES:
                continue
            assert variable.startswith("REPRISE_"), (entry, where, variable)
            assert variable.removeprefix("REPRISE_").lower() in fields, (entry, where, variable)
    assert "REPRISE_MAX_BATCH" in set_variables(objects_of(renderings["deploy/kubernetes"]))
    assert "REPRISE_DATABASE_URL" in set_variables(objects_of(renderings[EXAMPLE]))


def test_the_variable_check_catches_an_unknown_one() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "REPRISE_MAX_BACTH"}]}]}}
        },
    }
    (variable,) = set_variables([deployment])
    assert variable.removeprefix("REPRISE_").lower() not in set(Settings.model_fields)


def test_worker_probes_ping_this_pods_worker(manifests: list[dict[str, Any]]) -> None:
    """`reprise ping-worker` without --name asks the workers of this host only (REPRISE_HOSTNAME, else the
    hostname: the pod's name, which ends the worker's node name), and returns at its answer."""
    for role in Role:
        worker = container(by_kind(manifests, "Deployment")[f"reprise-{role.value}"])
        env = {item["name"] for item in worker.get("env", [])}
        assert "REPRISE_HOSTNAME" not in env, role  # the worker's host and the probe's are the pod's
        for probe in ("startupProbe", "readinessProbe"):
            command = worker[probe]["exec"]["command"]
            assert command[:2] == ["reprise", "ping-worker"] and "--name" not in command, (role, probe)
