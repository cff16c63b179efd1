"""The step cache's call costs on a device: a full UNet call, DeepCache's shallow call and TeaCache's
indicator, on the lab's UNets and on a UNet of Stable Diffusion 1.5's architecture (random weights
from its published config, bench/gpu/sd15/unet.json; no download), at batch 1 and 8 (a guided job is
two samples, so 2 and 16 rows), with the card named.

    python -m bench.gpu.step_cache --device cuda --json step-cache-gpu.json     # SD 1.5 at 512 px
    python -m bench.gpu.step_cache --device cpu --scale tiny --json x.json      # the CI's dry run

From the parts a method's mean step follows: deepcache:N costs (full + (N - 1) x shallow) / N a step,
teacache a full call on its full steps and the indicator on every step. Each figure is the median of
`repeats` timed calls after a warm-up, synchronized on CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import torch

ROOT: Final = Path(__file__).resolve().parents[2]
LAB_UNETS: Final = ("unet-large", "unet-small")
BATCHES: Final = (1, 8)


def _sd15_unet(scale: str) -> Any:
    import diffusers

    from bench.gpu.timing_model import Scale, configs

    config = {k: v for k, v in configs(Scale(scale))["unet"].items() if not k.startswith("_")}
    torch.manual_seed(0)
    unet: Any = diffusers.UNet2DConditionModel
    return unet(**config)


def _lab_unet(name: str) -> Any:
    import diffusers

    unet: Any = diffusers.UNet2DConditionModel
    return unet.from_pretrained(ROOT / "lab" / "weights" / name)


def _timed(call: Callable[[], Any], device: torch.device, repeats: int) -> float:
    def once() -> float:
        started = time.perf_counter()
        call()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - started) * 1000.0

    once()  # warm-up
    return statistics.median(once() for _ in range(repeats))


def _costs(
    unet: Any, sample: torch.Tensor, t: torch.Tensor, states: torch.Tensor, device: torch.device, repeats: int
) -> tuple[float, float, float]:
    """ms of a full call, DeepCache's shallow call (D = 1) and TeaCache's indicator on these inputs."""
    from workers.runtime import unet_parts

    with torch.inference_mode():
        _, deep = unet_parts.forward(unet, sample, t, states, keep_depth=1)
        assert deep is not None
        full = _timed(lambda: unet(sample, t, encoder_hidden_states=states), device, repeats)
        shallow = _timed(lambda: unet_parts.shallow(unet, sample, t, states, deep, 1), device, repeats)
        indicator = _timed(lambda: unet_parts.modulated_input(unet, sample, t, states), device, repeats)
    return full, shallow, indicator


def measure_unet(
    unet: Any, *, side: int, tokens: int, batches: Sequence[int], device: torch.device, repeats: int
) -> list[dict[str, Any]]:
    """Per batch of guided jobs: ms of a full call, a shallow call (D = 1) and the indicator."""
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    unet = unet.to(device, dtype).eval()
    rows = []
    for jobs in batches:
        n = 2 * jobs
        sample = torch.randn(n, unet.config.in_channels, side, side, device=device, dtype=dtype)
        states = torch.randn(n, tokens, unet.config.cross_attention_dim, device=device, dtype=dtype)
        t = torch.full((n,), 500, device=device)
        full, shallow, indicator = _costs(unet, sample, t, states, device, repeats)
        row = {"jobs": jobs, "full_ms": round(full, 3), "shallow_ms": round(shallow, 3)}
        row |= {"indicator_ms": round(indicator, 3), "shallow_share": round(shallow / full, 3)}
        rows.append(row | {"deepcache_3_speedup": round(3 * full / (full + 2 * shallow), 3)})
    return rows


def run(device_name: str, scale: str, repeats: int) -> dict[str, Any]:
    device = torch.device(device_name)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    models: dict[str, Any] = {}
    for name in LAB_UNETS:
        models[f"lab:{name.removeprefix('unet-')}"] = measure_unet(
            _lab_unet(name), side=8, tokens=32, batches=BATCHES, device=device, repeats=repeats
        )
    side = 64 if scale == "full" else 8  # 512 px through SD's VAE (8x); the tiny scale's 64 px
    models[f"sd15-{scale}"] = measure_unet(
        _sd15_unet(scale), side=side, tokens=77, batches=BATCHES, device=device, repeats=repeats
    )
    return {"device": card, "torch": torch.__version__, "repeats": repeats, "models": models}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", choices=("full", "tiny"), default="full", help="SD 1.5's UNet size.")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    report = run(args.device, args.scale, args.repeats)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
