"""Profiled costs of the models: what a denoising step, a decode and a cache entry cost.

The simulator runs on these instead of GPUs, and the replay and the simulator both weigh each
model's denoiser evaluations by its per-step cost to compute `compute_saved`. Measured values
come from `reprise bench runtime --json FILE` (bench.run.runtime.RuntimeBench, whose field names are
a contract); without one, `DEFAULT_COSTS` stand in, each citing where it comes from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from core.errors import CostsError

# --- documented defaults (SD3.5-Large as the large model, SDXL as the small one, MoDM 6) ---------
# LatentBox Table 1c: SD 3.5 at 1024x1024 on an H100 PCIe takes 4.09 s for 28 denoising steps.
DEFAULT_LARGE_STEP_MS = 4090.0 / 28
# MoDM 6 gives SDXL 3B parameters against SD3.5-Large's 8B; the papers publish no per-step SDXL
# time, so the parameter ratio stands in for the cost ratio (measure with `reprise bench runtime`).
DEFAULT_SMALL_STEP_MS = DEFAULT_LARGE_STEP_MS * 3.0 / 8.0
# LatentBox Table 1c: one SD 3.5 VAE decode at 1024x1024 on an H100 PCIe, 32.6 ms.
DEFAULT_DECODE_MS = 32.6
# LatentBox Table 1b: a pcodec-compressed SD 3.5 latent at 1024x1024 is 277 KB; taken for every
# cached latent state (NIRVANA 5.3 reports 144 KB per state for its smaller model).
DEFAULT_STATE_BYTES = 277 * 1024
# LatentBox Table 1b: an SD 3.5 PNG at 1024x1024 averages 1.4 MB.
DEFAULT_PNG_BYTES = int(1.4 * 1024 * 1024)
DEFAULT_SOURCE = (
    "defaults: SD3.5-Large step and decode on an H100 (LatentBox Table 1c), SDXL step = 3/8 of it "
    "(parameter ratio, MoDM 6), latent 277 KB and PNG 1.4 MB (LatentBox Table 1b)"
)


@dataclass(frozen=True, slots=True)
class StepCosts:
    """Per-step and per-item costs. `large_model`/`small_model` name the models as jobs report
    them in `denoiser_evaluations` (None: infer them from the jobs, see `step_ms_by_model`).

    state_bytes: one cached latent state (one K of an entry, or a final latent);
    entry_bytes: what one full cache entry stores (all captured states and the final latent).
    """

    large_step_ms: float = DEFAULT_LARGE_STEP_MS
    small_step_ms: float = DEFAULT_SMALL_STEP_MS
    decode_ms: float = DEFAULT_DECODE_MS
    state_bytes: int = DEFAULT_STATE_BYTES
    entry_bytes: int | None = None
    png_bytes: int = DEFAULT_PNG_BYTES
    large_model: str | None = None
    small_model: str | None = None
    source: str = DEFAULT_SOURCE
    batch_slowdown: tuple[tuple[int, float], ...] = ()  # (n, step_ms(n) / step_ms(1)), measured

    def slowdown(self, jobs: int) -> float:
        """How much longer one denoising step of `jobs` jobs batched takes than a step of one
        (step-level batching, workers.runtime.batch_loop), from `reprise bench runtime --batch`'s table:
        linear between measured sizes, and past the largest along its last segment. 1.0 without a table
        (nothing measured: the simulator then runs one job per worker) and for one job. The table is
        one model's (the runtime bench's batch_model); the other model's steps are taken to scale alike.
        """
        points = self.batch_slowdown
        if jobs <= 1 or not points:
            return 1.0
        for (low, low_x), (high, high_x) in pairwise(points):
            if jobs <= high:
                return low_x + (high_x - low_x) * (jobs - low) / (high - low)
        if len(points) == 1:
            return points[0][1]
        (low, low_x), (high, high_x) = points[-2], points[-1]
        return high_x + (high_x - low_x) * (jobs - high) / (high - low)

    def __post_init__(self) -> None:
        for name in ("large_step_ms", "small_step_ms", "decode_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise CostsError(f"{name} must be a non-negative number, not {value}")
        if self.large_step_ms <= 0:
            raise CostsError("large_step_ms must be positive: compute saved is measured against it")
        if self.state_bytes <= 0 or self.png_bytes <= 0:
            raise CostsError("state_bytes and png_bytes must be positive")
        sizes = [n for n, _ in self.batch_slowdown]
        if sizes and (sizes[0] != 1 or sizes != sorted(set(sizes))):
            raise CostsError(f"batch sizes must start at 1 and increase, not {sizes}")
        if any(not (math.isfinite(x) and x > 0) for _, x in self.batch_slowdown):
            raise CostsError("batch slowdowns must be positive numbers")

    def full_generation_ms(self, steps: int) -> float:
        """The large model's latency for one whole generation: T steps and the decode that ends it."""
        return steps * self.large_step_ms + self.decode_ms

    def entry_bytes_for(self, states: int) -> int:
        """Bytes of an entry holding `states` latents (measured when the costs file says so)."""
        return self.entry_bytes if self.entry_bytes is not None else states * self.state_bytes

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_COSTS = StepCosts()


def costs_from_runtime_json(data: Mapping[str, Any], *, source: str) -> StepCosts:
    """StepCosts from a `reprise bench runtime` JSON object (bench.run.runtime.RuntimeBench fields)."""
    try:
        large, small, decode = (float(data[name]) for name in ("large_step_ms", "small_step_ms", "decode_ms"))
    except KeyError as error:
        raise CostsError(
            f"{source}: missing {error.args[0]!r}; expected `reprise bench runtime --json` output"
        ) from None
    except (TypeError, ValueError):
        raise CostsError(f"{source}: large_step_ms, small_step_ms and decode_ms must be numbers") from None
    entry_bytes = int(data["entry_bytes"]) if data.get("entry_bytes") is not None else None
    states = 1 + len(data.get("capture_steps") or [])
    state_bytes = max(1, entry_bytes // states) if entry_bytes is not None else DEFAULT_STATE_BYTES
    png = int(data["png_bytes"]) if data.get("png_bytes") is not None else DEFAULT_PNG_BYTES
    return StepCosts(
        batch_slowdown=_slowdowns(data.get("batch") or {}, source=source),
        large_step_ms=large,
        small_step_ms=small,
        decode_ms=decode,
        state_bytes=state_bytes,
        entry_bytes=entry_bytes,
        png_bytes=png,
        large_model=data.get("large_model"),
        small_model=data.get("small_model"),
        source=f"measured: {source} ({data.get('device', '?')}, {data.get('width', '?')} px)",
    )


def _slowdowns(batch: Mapping[str, Any], *, source: str) -> tuple[tuple[int, float], ...]:
    """The runtime bench's `batch` block ({"n": {"step_ms": ...}}) as (n, step_ms(n) / step_ms(1))."""
    try:
        step_ms = sorted((int(n), float(row["step_ms"])) for n, row in batch.items())
    except (KeyError, TypeError, ValueError):
        raise CostsError(f"{source}: batch must map sizes to {{'step_ms': number}}") from None
    if step_ms and step_ms[0][0] != 1:
        raise CostsError(f"{source}: the batch table needs batch size 1 to scale from")
    return tuple((n, ms / step_ms[0][1]) for n, ms in step_ms)


def load_costs(path: Path | None) -> StepCosts:
    """The costs in a runtime-bench JSON file, or the documented defaults when `path` is None."""
    if path is None:
        return DEFAULT_COSTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CostsError(f"cannot read costs file {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise CostsError(f"costs file {path} is not JSON: {error.msg} (line {error.lineno})") from None
    if not isinstance(data, dict):
        raise CostsError(f"costs file {path} must hold a JSON object")
    return costs_from_runtime_json(data, source=str(path))


def with_models(costs: StepCosts, *, large_model: str, small_model: str | None) -> StepCosts:
    return replace(costs, large_model=large_model, small_model=small_model)
