"""`python -m bench.gpu`: the GPU check without the `reprise` command, whose other commands need the
service's stack; the same options as `reprise bench gpu`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__)
    parse.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu for a float32 dry run.")
    parse.add_argument("--json", type=Path, help="Write the report to this JSON file.")
    parse.add_argument("--runtime-json", type=Path, help="Also write the runtime bench's own JSON here.")
    parse.add_argument("--steps", type=int, default=50, help="T, the denoising steps of every run.")
    parse.add_argument("--capture", default=None, help="K, the captured steps (default 10%%..50%% of T).")
    parse.add_argument("--refine-k", type=int, default=None, help="The step refine starts at (default T/2).")
    parse.add_argument("--prompts", type=int, default=4, help="How many of the check's 4 lab prompts.")
    parse.add_argument("--seed", type=int, default=7, help="Seed of every generation.")
    parse.add_argument("--repeats", type=int, default=3, help="Timed runs per figure of the runtime bench.")
    parse.add_argument("--batch", default="1,2,4,8,16", help="Batch sizes for the runtime bench, or none.")
    parse.add_argument(
        "--worker-threads", type=int, default=8, help="Jobs at once through the worker's batch loop, or 0."
    )
    parse.add_argument("--no-reference", action="store_true", help="Skip the float32 CPU reference.")
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    from bench.gpu.runner import run_command

    args = parser().parse_args(argv)
    return run_command(
        device=args.device,
        steps=args.steps,
        capture=args.capture,
        refine_k=args.refine_k,
        prompts=args.prompts,
        seed=args.seed,
        repeats=args.repeats,
        batch=args.batch,
        reference=not args.no_reference,
        worker_threads=args.worker_threads,
        json_path=args.json,
        runtime_json=args.runtime_json,
    )


if __name__ == "__main__":
    sys.exit(main())
