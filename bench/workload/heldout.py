"""A held-out trace with a chosen share of hits, for checking the simulator against the live stack.

`python -m bench.workload.heldout OUT` writes 300 real prompts from the second half of the shared 5k trace
(lines 2500-4999, which no other figure of the README replays): 270 that match no earlier prompt of
the trace (cosine below MISS_BELOW with the configured text embedder, under the lowest row of the
nirvana-t2t table, 0.65) and 30 that match one placed at least GAP requests earlier (cosine above
HIT_ABOVE), every tenth request from the 20th on. Deterministic: the same file every time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.workload.embeddings import configured_embedder, trace_embeddings
from bench.workload.trace import DEFAULT_PROMPTS, Prompts, load_prompts
from core.settings import get_settings

FIRST_LINE = 2500
MISS_BELOW = 0.60
HIT_ABOVE = 0.70
GAP = 8  # requests between a hit and its match: more than the 4 clients have in flight
LENGTH = 300
HIT_SLOTS = frozenset({*range(20, LENGTH, 10), 295, 297})  # 30 of 300


def _distinct_misses(
    prompts: Prompts, vectors: npt.NDArray[np.float32], rows: range
) -> tuple[list[int], list[int]]:
    """Rows that match no earlier kept one (the misses), and the others (candidates for hits)."""
    kept: list[int] = []
    others: list[int] = []
    texts: set[str] = set()
    for row in rows:
        text = prompts.lines[row].strip()
        near = bool(kept) and float(np.max(vectors[kept] @ vectors[row])) >= MISS_BELOW
        if not text or text in texts or near or len(kept) == LENGTH - len(HIT_SLOTS):
            others.append(row)
            continue
        texts.add(text)
        kept.append(row)
    return kept, others


def heldout_rows(prompts: Prompts, vectors: npt.NDArray[np.float32]) -> list[int]:
    """The trace's prompt rows, in order (see the module docstring)."""
    misses, candidates = _distinct_misses(prompts, vectors, range(FIRST_LINE, len(prompts)))
    order: list[int] = []
    upcoming = iter(misses)
    for position in range(LENGTH):
        if position not in HIT_SLOTS:
            order.append(next(upcoming))
            continue
        earlier, recent = order[: max(0, position - GAP)], order[-GAP:]
        hit = next(
            row
            for row in candidates
            if row not in order
            and float(np.max(vectors[earlier] @ vectors[row])) > HIT_ABOVE
            and float(np.max(vectors[recent] @ vectors[row])) < MISS_BELOW
        )
        order.append(hit)
    return order


def main(out: Path) -> None:
    settings = get_settings()
    prompts = load_prompts(DEFAULT_PROMPTS)
    rows = range(FIRST_LINE, len(prompts))
    cache_dir = settings.data_dir / "bench" / "embeddings"
    vectors = trace_embeddings(prompts, rows, configured_embedder(settings), cache_dir=cache_dir).vectors
    order = heldout_rows(prompts, vectors)
    out.write_text("\n".join(prompts.lines[row] for row in order) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(order)} prompts, {len(HIT_SLOTS)} placed to hit")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("heldout-300.txt"))
