"""checkov's security scan of the rendered Kubernetes manifests, written to checkov-results.json.

checkov is a large install with dependencies of its own, so it is no test dependency: install it apart
(`python -m venv /tmp/checkov && /tmp/checkov/bin/pip install checkov`) and run, from the repository root,

    python deploy/kubernetes/scan.py --checkov /tmp/checkov/bin/checkov

after any change to the manifests. For each entry point it records a sha256 of the objects `kubectl
kustomize` renders, checkov's summary, every failed check and every waived one with its reason (a
`checkov.io/skipN: CHECK=reason` annotation on the object). tests/deploy/test_kubernetes.py renders the
manifests again and fails when they no longer match the recorded scan, or when the scan failed a check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "checkov-results.json"
# The entry points an operator renders: the default (base + autoscaling) and each overlay.
ENTRY_POINTS = (
    "deploy/kubernetes",
    "deploy/kubernetes/overlays/single-gpu-node",
    "deploy/kubernetes/overlays/example-secrets",
    "deploy/kubernetes/overlays/monitoring",
)


def render(entry: str, root: Path) -> str:
    """What `kubectl kustomize <entry>` renders, run from the repository root."""
    argv = ["kubectl", "kustomize", entry]
    return subprocess.run(argv, cwd=root, capture_output=True, text=True, check=True).stdout


def digest(manifests: str) -> str:
    """A sha256 of the rendered objects themselves, not of their text: the same for any kubectl that
    renders them in another order or layout."""
    objects = sorted(json.dumps(doc, sort_keys=True) for doc in yaml.safe_load_all(manifests) if doc)
    return hashlib.sha256("\n".join(objects).encode()).hexdigest()


def scan(manifests: str, checkov: str) -> dict[str, Any]:
    """checkov's verdict on one rendering: its summary, failed checks and waived checks."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "manifests.yaml"
        path.write_text(manifests)
        argv = [checkov, "-f", str(path), "--framework", "kubernetes", "--skip-download", "-o", "json"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    report = json.loads(done.stdout)
    results, summary = report["results"], report["summary"]
    return {
        "summary": {key: summary[key] for key in ("passed", "failed", "skipped", "checkov_version")},
        "failed": [{"check": c["check_id"], "resource": c["resource"]} for c in results["failed_checks"]],
        "waived": [
            {"check": c["check_id"], "resource": c["resource"], "reason": _reason(c)}
            for c in results["skipped_checks"]
        ],
    }


def _reason(check: dict[str, Any]) -> str:
    return str(check["check_result"].get("suppress_comment", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkov", default="checkov", help="The checkov executable.")
    args = parser.parse_args()
    root = HERE.parents[1]
    results = {}
    for entry in ENTRY_POINTS:
        manifests = render(entry, root)
        results[entry] = {"sha256": digest(manifests), **scan(manifests, args.checkov)}
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    for entry, result in results.items():
        print(entry, result["summary"])


if __name__ == "__main__":
    main()
