"""The install splits: the base install (`pip install '.[api]'`) runs the API, beat and
Flower without torch, diffusers or open_clip; the workers' extra brings them. Installed for real into a
fresh virtual environment from the package index, as an operator's image would be built."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "torchvision", "diffusers", "transformers", "open_clip", "sentence_transformers", "sklearn")
PROBE = f"""
import importlib.util, sys
import api.main, jobs.schedule, reprise.cli
api.main.create_app()
heavy = [name for name in {HEAVY!r} if importlib.util.find_spec(name) is not None]
print("heavy:", heavy)
sys.exit(1 if heavy else 0)
"""


def test_the_api_extra_installs_and_imports_without_torch(tmp_path: Path) -> None:
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools never empties it: no stale module
    env_dir = tmp_path / "api-env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # As the Dockerfile's api image: a pip that checks a constraints file's hashes (requirements.lock has
    # them), the api extra's requirements pinned by the lock, then the project itself without resolving.
    requirements = tmp_path / "requirements-api.txt"
    listed = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "requirements.py"), str(ROOT / "pyproject.toml"), "api"],
        capture_output=True,
        text=True,
        check=True,
    )
    requirements.write_text(listed.stdout)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    for step in (
        ["pip>=26.1"],
        ["-c", str(ROOT / "requirements.lock"), "-r", str(requirements)],
        ["--no-deps", str(ROOT)],
    ):
        install = subprocess.run([*pip, *step], capture_output=True, text=True, timeout=900)
        assert install.returncode == 0, (step, install.stderr[-3000:])
    probe = subprocess.run(
        [str(python), "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert probe.returncode == 0, probe.stdout + probe.stderr[-3000:]
    assert "heavy: []" in probe.stdout


def test_this_environment_is_the_workers_one() -> None:
    """`make env` installs the `worker` extra: the heavy modules the API goes without are here."""
    import importlib.util

    assert all(importlib.util.find_spec(name) is not None for name in HEAVY), sys.path
