"""`reprise bench gpu`, registered on the bench command group: the runtime's GPU path checked on the
lab's models (bench.gpu; `python -m bench.gpu` runs the same where only the worker's libraries are)."""

from __future__ import annotations

from pathlib import Path

import typer

from reprise.commands.bench import bench_app


@bench_app.command("gpu")
def gpu_command(
    device: str = typer.Option("cuda", "--device", help="cuda, cuda:N, or cpu for a float32 dry run."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the report to this JSON file."),
    runtime_json: Path | None = typer.Option(
        None, "--runtime-json", help="Also write the runtime bench's own JSON (`--costs` reads it)."
    ),
    steps: int = typer.Option(50, "--steps", min=2, help="T, the denoising steps of every run."),
    capture: str | None = typer.Option(
        None, "--capture", help="K, the captured steps (default 10%..50% of T)."
    ),
    refine_k: int | None = typer.Option(
        None, "--refine-k", min=1, help="The step refine starts at (default T/2)."
    ),
    prompts: int = typer.Option(4, "--prompts", min=1, max=4, help="How many of the check's 4 lab prompts."),
    seed: int = typer.Option(7, "--seed", help="Seed of every generation."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Timed runs per figure of the runtime bench."),
    batch: str = typer.Option("1,2,4,8,16", "--batch", help="Batch sizes for the runtime bench, or none."),
    reference: bool = typer.Option(True, "--reference/--no-reference", help="The float32 CPU reference."),
    worker_threads: int = typer.Option(
        8, "--worker-threads", min=0, help="Jobs at once through the worker's batch loop (0: none)."
    ),
) -> None:
    """Run generate, resume, refine, decode, the worker's batch loop, the CPU reference and the runtime
    bench (with its batches) on the lab's models on a GPU in float16, print a summary and exit 1 when a
    check failed."""
    from bench.gpu.runner import run_command

    status = run_command(
        device=device,
        steps=steps,
        capture=capture,
        refine_k=refine_k,
        prompts=prompts,
        seed=seed,
        repeats=repeats,
        batch=batch,
        reference=reference,
        worker_threads=worker_threads,
        json_path=json_path,
        runtime_json=runtime_json,
    )
    raise typer.Exit(status)
