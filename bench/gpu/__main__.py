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
    parse.add_argument("--no-reference", action="store_true", help="Skip the float32 CPU reference.")
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    from bench.gpu.runner import (
        GpuCheckOptions,
        parse_steps,
        progress,
        quiet_offline,
        run_gpu_check,
        write_outputs,
    )
    from core.errors import SettingsError

    args = parser().parse_args(argv)
    try:
        options = GpuCheckOptions(
            device=args.device, steps=args.steps, prompts=args.prompts, seed=args.seed,
            capture=parse_steps(args.capture, "--capture") if args.capture is not None else None,
            refine_k=args.refine_k, repeats=args.repeats, batch_sizes=parse_steps(args.batch, "--batch"),
            reference=not args.no_reference,
        )  # fmt: skip
        options.checked_capture()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    quiet_offline()
    try:
        report = run_gpu_check(options, on_check=progress(args.json))
    except SettingsError as error:  # a REPRISE_* variable of this host is invalid
        print(error, file=sys.stderr)
        return 2
    print(report.summary())
    for path in write_outputs(report, json_path=args.json, runtime_json=args.runtime_json):
        print(f"wrote {path}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
