"""The monitoring component (deploy/kubernetes/monitoring): the Prometheus Operator's monitors scrape the
ports the pods serve their metrics on, every worker Deployment's and the API's, and the dashboard Grafana
loads is the repository's dashboard, unchanged."""

from __future__ import annotations

import json
from typing import Any

from tests.deploy.conftest import KUBERNETES, MONITORING, by_kind, container, objects_of
from tests.test_dashboard import DASHBOARD

WORKERS = {
    "reprise-admit",
    "reprise-large",
    "reprise-small",
    "reprise-decode",
    "reprise-io",
    "reprise-maintenance",
}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression  # the only operator the manifests use
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_the_pod_monitor_scrapes_every_worker_on_its_metrics_port(renderings: dict[str, str]) -> None:
    objects = objects_of(renderings[MONITORING])
    (monitor,) = by_kind(objects, "PodMonitor").values()
    config = by_kind(objects, "ConfigMap")["reprise-config"]["data"]
    scraped = set()
    for name, deployment in by_kind(objects, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if not _selects(monitor["spec"]["selector"], labels):
            continue
        scraped.add(name)
        ports = {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert ports[endpoint["port"]] == int(config["REPRISE_WORKER_METRICS_PORT"]), name
    assert scraped == WORKERS


def test_the_service_monitor_scrapes_the_apis_metrics_port(renderings: dict[str, str]) -> None:
    objects = objects_of(renderings[MONITORING])
    (monitor,) = by_kind(objects, "ServiceMonitor").values()
    services = [
        s
        for s in by_kind(objects, "Service").values()
        if _selects(monitor["spec"]["selector"], s["metadata"]["labels"])
    ]
    (service,) = services
    assert service["metadata"]["name"] == "reprise-api"
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    config = by_kind(objects, "ConfigMap")["reprise-config"]["data"]
    assert port["port"] == int(config["REPRISE_METRICS_PORT"])


def test_grafana_loads_the_repositorys_dashboard(renderings: dict[str, str]) -> None:
    assert (KUBERNETES / "monitoring" / "reprise.json").read_text() == DASHBOARD.read_text()
    objects = objects_of(renderings[MONITORING])
    dashboard = by_kind(objects, "ConfigMap")["reprise-grafana-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label
    assert json.loads(dashboard["data"]["reprise.json"]) == json.loads(DASHBOARD.read_text())


def test_monitoring_is_optional(renderings: dict[str, str]) -> None:
    """Only the entry point that asks for it needs the Prometheus Operator's CRDs."""
    for entry, text in renderings.items():
        kinds = {obj["kind"] for obj in objects_of(text)}
        assert ("PodMonitor" in kinds) is (entry == MONITORING), entry
