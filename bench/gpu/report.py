"""What the GPU check reports: each check's outcome and figures, the machine and libraries it ran on,
and the report's JSON and terminal forms.

A check ends in one status: pass; fail (it ran and broke a contract, or raised); absent (what it calls
is not in this checkout yet); skip (an earlier check it needs failed). The report is ok when no check
failed: absent and skipped checks are shown, not counted against it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import struct
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch

LIBRARIES = ("diffusers", "transformers", "huggingface_hub", "safetensors", "numpy", "pydantic")


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ABSENT = "absent"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One check's result: its status, a line saying what it found, its figures and its wall time."""

    name: str
    status: Status
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def line(self, width: int = 0) -> str:
        return f"{self.status.value:6} {self.name.ljust(width)}  {self.detail}  [{self.seconds:.1f}s]"

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
            **self.figures,
        }


def outcome(name: str, passed: bool, detail: str, figures: dict[str, Any]) -> Outcome:
    return Outcome(name, Status.PASS if passed else Status.FAIL, detail, figures)


def timed_check(name: str, check: Callable[[], Outcome]) -> Outcome:
    """Run one check, timing it; an exception is the check's failure (with its traceback's tail),
    never the end of the run, so that every other check still reports."""
    started = time.perf_counter()
    try:
        result = check()
    except Exception as error:
        tail = traceback.format_exc().strip().splitlines()[-12:]
        result = Outcome(name, Status.FAIL, f"{type(error).__name__}: {error}", {"traceback": tail})
    return Outcome(result.name, result.status, result.detail, result.figures, time.perf_counter() - started)


def skipped(name: str, why: str) -> Outcome:
    return Outcome(name, Status.SKIP, why)


@dataclass(slots=True)
class GpuReport:
    """The whole run: where it ran, what it ran, each check in order."""

    environment: dict[str, Any]
    setup: dict[str, Any]
    checks: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    on_check: Callable[[GpuReport, Outcome], None] | None = None  # told of each check as it ends

    def add(self, *outcomes: Outcome) -> None:
        for item in outcomes:
            self.checks.append(item)
            if self.on_check is not None:
                self.on_check(self, item)

    @property
    def ok(self) -> bool:
        return all(check.status is not Status.FAIL for check in self.checks)

    def get(self, name: str) -> Outcome | None:
        return next((check for check in self.checks if check.name == name), None)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "environment": self.environment,
            "setup": self.setup,
            "checks": {check.name: check.as_json() for check in self.checks},
            "seconds": round(self.seconds, 2),
        }

    def summary(self) -> str:
        """The report for a terminal: the machine, one line per check, the verdict."""
        env = self.environment
        where = f"{env['card']}: {env['dtype']} on {env['device']}" if "card" in env else "(no device)"
        lines = [
            f"GPU check on {where}, torch {env.get('torch')} (CUDA {env.get('cuda')}), diffusers "
            f"{env.get('diffusers')}, transformers {env.get('transformers')}",
            f"lab models at T={self.setup.get('steps')}, {self.setup.get('size')}px, "
            f"{len(self.setup.get('prompts', []))} prompts, captured at k={self.setup.get('capture_steps')}",
        ]
        encoder = env.get("text_encoder") or {}
        if encoder:
            lines.append(
                f"text encoder: {encoder.get('weights')} ({', '.join(encoder.get('stored_dtypes', []))}, "
                f"sha256 {str(encoder.get('sha256'))[:16]})"
            )
        width = max((len(check.name) for check in self.checks), default=0)
        lines += [check.line(width) for check in self.checks]
        failed = [check.name for check in self.checks if check.status is Status.FAIL]
        verdict = f"FAILED: {', '.join(failed)}" if failed else "ok: no check failed"
        lines.append(f"{verdict} ({self.seconds:.1f}s)")
        return "\n".join(lines)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_json(), indent=2) + "\n")


def environment(device: torch.device | None = None, dtype: torch.dtype | None = None) -> dict[str, Any]:
    """The versions that make the figures and whether CUDA is there; with a device, the card
    (torch.cuda.get_device_name, or the CPU) and the compute dtype."""
    found: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
    }
    for library in LIBRARIES:
        try:
            found[library] = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            found[library] = None
    if device is None:
        return found
    on_cuda = device.type == "cuda"
    found |= {
        "device": str(device),
        "card": torch.cuda.get_device_name(device) if on_cuda else f"CPU ({platform.machine()})",
        "dtype": str(dtype).removeprefix("torch."),
        "cudnn": torch.backends.cudnn.version() if on_cuda else None,  # type: ignore[no-untyped-call]
    }
    if on_cuda:
        found["memory_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return found


def weights_provenance(weights: Path) -> dict[str, Any]:
    """Which text-encoder weights the pipelines load: the resolved file, its sha256, the dtypes it
    stores and its safetensors metadata (a float16 copy of the weights shows as float16 here)."""
    resolved = weights.resolve()
    data = resolved.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header: dict[str, Any] = json.loads(data[8 : 8 + length])
    metadata = header.pop("__metadata__", {})
    return {
        "weights": str(resolved),
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "stored_dtypes": sorted({str(entry["dtype"]) for entry in header.values()}),
        "metadata": metadata,
    }
