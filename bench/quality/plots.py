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
