"""The Kubernetes manifests as `kubectl kustomize` renders them (offline), by entry point."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"


def load_scan_module() -> ModuleType:
    """deploy/kubernetes/scan.py (not a package): its entry points and its digest of a rendering."""
    spec = importlib.util.spec_from_file_location("deploy_kubernetes_scan", KUBERNETES / "scan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCAN = load_scan_module()
ENTRY_POINTS: tuple[str, ...] = SCAN.ENTRY_POINTS
EXAMPLE = "deploy/kubernetes/overlays/example-secrets"  # the only entry point that holds Secrets
MONITORING = "deploy/kubernetes/overlays/monitoring"  # the default with the monitoring component


def render_text(entry: str) -> str:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize` renders the manifests (CI has it)")
    done = subprocess.run(["kubectl", "kustomize", entry], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def objects_of(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="session")
def renderings() -> dict[str, str]:
    """Each entry point's rendering, as text."""
    return {entry: render_text(entry) for entry in ENTRY_POINTS}


@pytest.fixture(scope="session")
def manifests(renderings: dict[str, str]) -> list[dict[str, Any]]:
    """The default entry point's objects (base and autoscaling)."""
    return objects_of(renderings["deploy/kubernetes"])


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(only, dict)
    return only
