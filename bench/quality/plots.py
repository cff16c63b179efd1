"""The profiler's figure: mean quality drop of hits against similarity, one line per k (NIRVANA Fig. 9)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt


def plot_profile(result: dict[str, Any], path: Path) -> Path:
    lines: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for point in result["curve"]:
        middle = (point["similarity_low"] + point["similarity_high"]) / 2
        lines[int(point["k"])].append((middle, point["drop"]))
    fig, axis = plt.subplots(figsize=(6, 4))
    for k, points in sorted(lines.items()):
        xs, ys = zip(*sorted(points), strict=True)
        axis.plot(xs, ys, marker="o", label=f"k = {k}")
    axis.axhline(result["tolerance"], color="red", linestyle="--", label=f"tolerance {result['tolerance']}")
    axis.set_xlabel(f"similarity ({result['embedder']})")
    axis.set_ylabel("mean quality drop vs fresh")
    axis.set_title(f"{result['models']['large']} -> {result['models']['hit']} ({result['hit_operation']})")
    axis.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_step_cache(report: dict[str, Any], path: Path) -> Path:
    """`reprise bench step-cache`'s curve: speedup against the judge's drop (95% interval), per model."""
    fig, axis = plt.subplots(figsize=(6, 4))
    models = sorted({run["model"] for run in report["runs"]})
    for model in models:
        runs = sorted((r for r in report["runs"] if r["model"] == model), key=lambda r: r["speedup"])
        xs = [r["speedup"] for r in runs]
        ys = [r["drop"] for r in runs]
        errors = [
            [r["drop"] - r["drop_ci95"][0] for r in runs],
            [r["drop_ci95"][1] - r["drop"] for r in runs],
        ]
        axis.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=model)
        for run in runs:
            where = (run["speedup"], run["drop"])
            axis.annotate(run["setting"], where, fontsize=7, xytext=(3, 3), textcoords="offset points")
    axis.axhline(0.01, color="red", linestyle="--", label="drop budget 0.01")
    axis.set_xlabel("speedup over off (images per CPU-second)")
    axis.set_ylabel("judged drop vs off (95% interval)")
    axis.set_title(
        f"step cache on the lab, {report['runs'][0]['prompts']} prompts, default {report['default']}"
    )
    axis.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
