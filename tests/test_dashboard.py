"""The Grafana dashboard (deploy/grafana/dashboards/reprise.json) queries only metrics the code exports, and
every worker metric has a panel: a renamed or added metric fails here, not on an empty graph."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "reprise.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PACKAGES = ("core", "db", "jobs", "api", "workers", "lab", "bench", "reprise")
# An instrument (Counter(...)) or a family a custom collector builds at scrape time (GaugeMetricFamily(...)).
DEFINITION = re.compile(
    r'\b(?:Counter|Gauge|Histogram|Summary|Info|Enum|(?:Counter|Gauge|Histogram|Summary)MetricFamily)\(\s*"(reprise_[a-z0-9_]+)"'
)
METRIC = re.compile(r"\breprise_[a-z0-9_]+\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")  # the labels an aggregation keeps or drops
SCRAPE_LABELS = {"instance", "job"}  # the target labels Prometheus gives every scraped sample
DATASOURCE_VARIABLE = "${datasource}"  # the dashboard's datasource variable, as panels reference it
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')  # label values: {route="reprise_x"} names no metric
# The samples each family type exports (prometheus_client's text exposition).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}


def metric_names(expr: str) -> set[str]:
    """The Reprise metric names a PromQL expression reads (label values and functions aside)."""
    return set(METRIC.findall(QUOTED.sub('""', expr)))


def defined_metrics() -> dict[str, set[str]]:
    """Each project module that defines reprise_* metrics -> the names it gives them (a new metrics module
    is found here, not listed by hand)."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            names = set(DEFINITION.findall(path.read_text()))
            if names:
                found[".".join(path.relative_to(ROOT).with_suffix("").parts)] = names
    return found


def exported_families() -> dict[str, str]:
    """Every reprise_* metric family the API and the workers export: name -> type (the instruments they
    register, and the families the API reads from its stores at scrape time)."""
    for module in defined_metrics():
        importlib.import_module(module)
    from api.exposition import described_families

    families = [*REGISTRY.collect(), *described_families()]
    return {family.name: family.type for family in families if family.name.startswith("reprise_")}


def exported_samples() -> set[str]:
    return {
        family + suffix
        for family, kind in exported_families().items()
        for suffix in SUFFIXES.get(kind, ("",))
    }


def _dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def _panels() -> list[dict[str, Any]]:
    """The panels that query (rows only group them), nested ones included."""
    found: list[dict[str, Any]] = []
    for panel in _dashboard()["panels"]:
        found.extend(panel.get("panels", []))
        if panel["type"] != "row":
            found.append(panel)
    return found


def _exprs() -> list[str]:
    return [target["expr"] for panel in _panels() for target in panel["targets"]]


def test_metric_names_are_read_from_promql() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le, model) (rate(reprise_worker_step_duration_seconds_bucket"
        '{role="large", queue="reprise_jobs_total"}[5m]))) / ignoring (model) '
        "sum without (role) (rate(reprise_jobs_created_total[5m])) + max by (queue) (reprise_queue_depth)"
    )
    assert metric_names(expr) == {
        "reprise_worker_step_duration_seconds_bucket",
        "reprise_jobs_created_total",
        "reprise_queue_depth",
    }
    assert metric_names("sum by (route) (rate(http_requests_total[5m]))") == set()


def test_every_metrics_module_is_found_and_registers_its_metrics() -> None:
    defined = defined_metrics()
    assert {"api.metrics", "api.read_metrics", "workers.metrics"} <= set(defined)
    families = exported_families()
    names = {name.removesuffix("_total") for module in defined.values() for name in module}
    assert names <= set(families), names - set(families)


def test_exported_samples_follow_the_family_type() -> None:
    samples = exported_samples()
    assert {
        "reprise_worker_jobs_total",
        "reprise_worker_skipped_steps_bucket",
        "reprise_read_nodes",
    } <= samples
    assert (
        "reprise_worker_jobs" not in samples
    )  # a counter's samples end in _total: its family name is no series
    assert "reprise_read_nodes_total" not in samples


def test_every_query_names_an_exported_metric() -> None:
    exprs = _exprs()
    assert exprs
    samples = exported_samples()
    unknown = {name for expr in exprs for name in metric_names(expr)} - samples
    assert unknown == set(), f"the dashboard queries metrics no module exports: {sorted(unknown)}"


def test_every_expression_reads_a_reprise_metric() -> None:
    for expr in _exprs():
        assert metric_names(expr), expr


def test_every_worker_metric_has_a_panel() -> None:
    used = {name for expr in _exprs() for name in metric_names(expr)}
    missing = [
        family
        for family, kind in exported_families().items()
        if family.startswith("reprise_worker_")
        and not any(family + suffix in used for suffix in SUFFIXES.get(kind, ("",)))
    ]
    assert missing == [], f"worker metrics without a panel: {missing}"


def test_panels_read_the_datasource_variable_which_defaults_to_the_provisioned_one() -> None:
    """Every panel names the datasource through the `datasource` variable, so the dashboard works on any
    Grafana (Kubernetes' included); compose's provisioned uid is the variable's default."""
    uid = yaml_datasource_uid()
    (variable,) = [v for v in _dashboard()["templating"]["list"] if v["name"] == DATASOURCE_VARIABLE[2:-1]]
    assert (variable["type"], variable["query"], variable["current"]["value"]) == (
        "datasource",
        "prometheus",
        uid,
    )
    panels = _panels()
    assert len(panels) >= 10
    for panel in panels:
        assert panel.get("title"), panel
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_VARIABLE}, panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"])["uid"] == DATASOURCE_VARIABLE, panel["title"]
            assert target["expr"].strip(), panel["title"]
    assert f'"uid": "{uid}"' not in DASHBOARD.read_text()  # no panel pins the datasource
    ids = [panel["id"] for panel in _dashboard()["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"


def yaml_datasource_uid() -> str:
    """The uid of the Prometheus datasource Grafana provisions (the dashboard names it)."""
    datasources = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    (prometheus,) = [source for source in datasources if source["type"] == "prometheus"]
    assert prometheus["uid"] == "prometheus"
    assert prometheus["url"] == "http://prometheus:9090"
    return str(prometheus["uid"])


def worker_labels() -> dict[str, set[str]]:
    """The labels each worker metric's samples carry, from the instruments themselves."""
    for module in defined_metrics():
        importlib.import_module(module)
    names = REGISTRY._collector_to_names  # prometheus_client keeps no public map from names to collectors
    return {
        name: set(getattr(collector, "_labelnames", ()))
        for collector, family in names.items()
        for name in family
        if name.startswith("reprise_worker_")
    }


def test_worker_panels_group_by_labels_the_workers_or_any_prometheus_give() -> None:
    """A label only one Prometheus configuration adds (compose's `pool` target label) would leave the
    panel empty elsewhere: group worker metrics by their own labels, `le`, or the target labels every
    scrape gets (instance, job)."""
    labels = worker_labels()
    assert {"role", "kind"} <= labels["reprise_worker_gpu_memory_bytes"]
    checked = 0
    for expr in _exprs():
        read = [labels[name] for name in metric_names(expr) if name in labels]
        if not read:
            continue
        known = set.union(*read) | SCRAPE_LABELS | {"le"}
        for group in GROUPING.findall(expr):
            used = {label.strip() for label in group.split(",") if label.strip()}
            assert used <= known, (expr, used - known)
            checked += 1
    assert checked >= 10
    assert GROUPING.findall("sum by (pool, role) (x)") == ["pool, role"]  # what compose's label looked like


def test_the_dashboard_is_a_grafana_model() -> None:
    dashboard = _dashboard()
    assert {"uid", "title", "schemaVersion", "panels"} <= set(dashboard)
    assert dashboard["schemaVersion"] >= 36
    for panel in dashboard["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


def test_brackets_balance_in_every_expression() -> None:
    pairs = {")": "(", "]": "[", "}": "{"}
    for expr in _exprs():
        stack: list[str] = []
        for char in QUOTED.sub('""', expr):
            if char in "([{":
                stack.append(char)
            elif char in pairs:
                assert stack and stack.pop() == pairs[char], expr
        assert stack == [], expr


def test_quantiles_keep_the_bucket_label() -> None:
    """histogram_quantile needs `le` through every aggregation, or it answers NaN."""
    for expr in _exprs():
        if "histogram_quantile" in expr:
            assert re.search(r"by \([^)]*\ble\b", expr), expr
            assert "_bucket" in expr, expr
