"""`reprise models ...`: the models the workers load when none is configured, and a check of the
configured ones (workers/runtime/model_check.py)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from core.settings import get_settings

models_app = typer.Typer(
    help="Models: train the quality lab's, build the tiny random ones, or check the configured ones.",
    no_args_is_help=True,
)


@models_app.command("train")
def train_command(
    smoke: bool = typer.Option(
        False, "--smoke", help="A size that trains in seconds (tests); not committed."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Weights directory. Default: lab/weights (committed); with --smoke <data_dir>/lab-smoke.",
    ),
    seed: int | None = typer.Option(None, "--seed", help="Training seed (default: the committed weights')."),
    json_out: Path | None = typer.Option(None, "--json", help="Write {models, seconds, ...} to this file."),
    only: str | None = typer.Option(
        None,
        "--only",
        help="Train just these again (comma-separated: a UNet such as unet-small, distilled from the "
        "unet-large there; judge-b and discriminator, the stages after the models, which validate the "
        "judges; video-judge and unet-video, the video parts, on one thread) into the trained weights of "
        "--out, with their manifest's seed; the rest is kept.",
    ),
    recipe: str | None = typer.Option(
        None,
        "--recipe",
        help="An earlier recipe of the committed weights, by the date it was adopted (lab.recipes.RECIPES), "
        "to train the set a results page measured on; needs --out. Default: the committed weights' recipe.",
    ),
) -> None:
    """Train the quality lab's judge, autoencoders and UNets on this CPU (about an hour on 2 cores;
    --smoke: seconds; --only unet-small: minutes), then assemble their pipelines. Same seed, same
    torch, kernels pinned to AVX2 (lab.build.PINNED_KERNELS): the same weights."""
    from lab.build import assemble_into, model_dirs
    from lab.models import WEIGHTS_DIR

    settings = get_settings()
    weights = (
        out if out is not None else (settings.data_dir / "lab-smoke" / "weights" if smoke else WEIGHTS_DIR)
    )
    try:
        manifest = _train(weights, smoke=smoke, seed=seed, only=only, recipe=recipe, own_dir=out is not None)
    except (ValueError, FileNotFoundError) as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None
    paths = assemble_into(weights.parent / f"{weights.name}-pipelines", weights)
    report = {
        "models": model_dirs(paths),
        "judge": str(paths.judge),
        "seconds": manifest["total_seconds"],
        "seconds_per_component": manifest["seconds"],
        "judge_heldout_accuracy": manifest["judge_heldout_accuracy"],
        "digest": manifest["digest"],
        "weights": str(weights),
    }
    for name, directory in report["models"].items():
        typer.echo(f"{name:8} {directory}")
    typer.echo(f"trained in {manifest['total_seconds']:.0f} s; weights digest {manifest['digest'][:12]}")
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2) + "\n")


def _train(
    weights: Path, *, smoke: bool, seed: int | None, only: str | None, recipe: str | None, own_dir: bool
) -> dict[str, Any]:
    """The whole set, or `--only` its named parts, by the recipe of that name (the committed weights'
    by default; another only into a directory of its own)."""
    from lab.build import SEED, train_lab
    from lab.recipes import CURRENT, recipe_for

    name = recipe or CURRENT
    if name != CURRENT and not own_dir:
        raise ValueError(f"--recipe {name} trains a set other than the committed one: give it --out DIR")
    recipe_for(smoke, name)  # an unknown name is refused before any training, --only video-* included
    if only is not None:
        return _retrain(weights, only, smoke=smoke, recipe=name)
    return train_lab(weights, smoke=smoke, seed=SEED if seed is None else seed, log=typer.echo, recipe=name)


def _retrain(weights: Path, only: str, *, smoke: bool, recipe: str) -> dict[str, Any]:
    """`--only`: each named UNet again, then the stages after the models once if any is named, then
    the named video parts."""
    from lab.build import retrain_unet, retrain_video
    from lab.retraining import retrain_stages
    from lab.stages import STAGES
    from lab.video.build import VIDEO_PARTS

    names = [name.strip() for name in only.split(",") if name.strip()]
    manifest: dict[str, Any] = {}
    for name in names:
        if name not in STAGES and name not in VIDEO_PARTS:
            manifest = retrain_unet(weights, name, smoke=smoke, log=typer.echo, recipe_name=recipe)
    if any(name in STAGES for name in names):
        manifest = retrain_stages(weights, smoke=smoke, log=typer.echo, recipe=recipe)
    video = tuple(name for name in VIDEO_PARTS if name in names)
    if video:
        manifest = retrain_video(weights, video, smoke=smoke, log=typer.echo)
    if not manifest:
        raise ValueError(f"--only {only!r} names nothing to train")
    return manifest


@models_app.command("tiny")
def tiny_command(
    out: Path | None = typer.Option(None, "--out", help="Directory to build in. Default: <data_dir>/models."),
) -> None:
    """Build the tiny random models (no download) unless already built; print their paths."""
    from workers.runtime.tiny import ensure_tiny_models  # torch loads only for this command

    paths = ensure_tiny_models(get_settings(), out=out)
    typer.echo(f"large  {paths.large}")
    typer.echo(f"small  {paths.small}")
    typer.echo(f"clip   {paths.clip_config} + {paths.clip_checkpoint.name}")
    typer.echo("their images are noise: set REPRISE_MODEL_SET=lab (the default) or real models")


@models_app.command("lab")
def lab_command() -> None:
    """Assemble the quality lab's pipelines from the committed weights (done on first use anyway)."""
    from lab.models import LAB_MODELS, ensure_lab_models

    try:
        paths = ensure_lab_models(get_settings())
    except FileNotFoundError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None
    for model in LAB_MODELS:
        typer.echo(f"{model.name:8} {paths.pipeline(model.name)}  (family {model.family})")
    typer.echo(f"judge    {paths.judge}")


class CheckRole(StrEnum):
    LARGE = "large"
    SMALL = "small"
    DECODE = "decode"
    CLIP = "clip"
    ALL = "all"


@models_app.command("check")
def check_command(
    role: CheckRole = typer.Option(CheckRole.ALL, "--role", help="The model to check; all: every one."),
    steps: int = typer.Option(2, "--steps", min=2, help="T of the resume check's run (k = T // 2)."),
    size: int | None = typer.Option(
        None, "--size", min=8, help="Side in pixels of that run. Default: the model's native size."
    ),
    tolerance: float = typer.Option(
        1e-5, "--tolerance", min=0.0, help="Largest final-latent difference a resume may show."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report to this file."),
) -> None:
    """Check the configured models before the workers start: files and layout (a Hugging Face id from
    the local cache), family, scheduler, and that a resume from step k reproduces the run exactly, on a
    `--steps`-step run of each model. Exit code 0 only when every check passes."""
    from diffusers.utils import logging as diffusers_logging  # torch loads only for this command
    from transformers.utils import logging as transformers_logging

    from workers.runtime.model_check import CHECK_ROLES, check_models

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    roles = CHECK_ROLES if role is CheckRole.ALL else (role.value,)
    report = check_models(get_settings(), roles, steps=steps, size=size, tolerance=tolerance)
    for check in report.checks:
        typer.echo(check.line)
    failed = sum(check.status == "FAIL" for check in report.checks)
    typer.echo("all checks passed" if report.ok else f"{failed} check(s) failed")
    if json_out is not None:
        json_out.write_text(json.dumps(report.as_json(), indent=2) + "\n")
    if not report.ok:
        raise typer.Exit(1)


@models_app.command("embedder")
def embedder_command(
    prompts: int = typer.Option(
        200, "--prompts", min=8, help="Prompts to embed (the shared trace's first N)."
    ),
    threads: int | None = typer.Option(
        None, "--threads", min=1, help="onnxruntime intra-op threads. Default: the embedder's default."
    ),
    int8: bool = typer.Option(True, "--int8/--no-int8", help="Also measure the int8-quantised export."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report to this file."),
) -> None:
    """Compare the MiniLM text embedder on torch (sentence-transformers) with its ONNX Runtime export
    (built on first use under <data_dir>/models/minilm-onnx): ms per prompt one at a time (p50/p99,
    admission's case) and in batches of 8 and 32, and the cosine of each to the torch vectors."""
    from transformers.utils import logging as transformers_logging

    from core.embedders import TextEmbedder
    from workers.runtime.embedders.minilm import MiniLMTextEmbedder
    from workers.runtime.embedders.minilm_onnx import (
        DEFAULT_INTRA_OP_THREADS,
        MiniLMOnnxEmbedder,
        OnnxPrecision,
        compare_embedders,
    )

    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    settings = get_settings()
    texts, source = _benchmark_prompts(prompts)
    intra = threads if threads is not None else DEFAULT_INTRA_OP_THREADS
    embedders: dict[str, TextEmbedder] = {"torch": MiniLMTextEmbedder()}
    precisions = list(OnnxPrecision) if int8 else [OnnxPrecision.FP32]
    for precision in precisions:
        embedders[f"onnx-{precision.value}"] = onnx = MiniLMOnnxEmbedder(
            models_dir=settings.tiny_models_dir, precision=precision, intra_op_threads=intra
        )
    typer.echo(f"{len(texts)} prompts from {source}; onnx export {onnx.root}; {intra} intra-op thread(s)")
    report = compare_embedders(embedders, texts)
    typer.echo(
        f"{'embedder':10} {'p50 ms':>8} {'p99 ms':>8} {'b8 ms/p':>8} {'b32 ms/p':>9} {'cos min':>9} mean"
    )
    for name, row in report.items():
        typer.echo(
            f"{name:10} {row['single_p50_ms']:8.2f} {row['single_p99_ms']:8.2f} "
            f"{row['batch8_ms_per_prompt']:8.2f} {row['batch32_ms_per_prompt']:9.2f} "
            f"{row['cosine_min']:9.6f} {row['cosine_mean']:.6f}"
        )
    if json_out is not None:
        document = {"prompts": len(texts), "source": source, "intra_op_threads": intra, "embedders": report}
        json_out.write_text(json.dumps(document, indent=2) + "\n")


def _benchmark_prompts(count: int) -> tuple[list[str], str]:
    """The shared DiffusionDB trace's first `count` non-empty prompts, or a generated list without it."""
    from bench.workload.trace import DEFAULT_PROMPTS, load_prompts
    from core.errors import TraceError

    try:
        lines = [line for line in load_prompts(DEFAULT_PROMPTS).lines if line.strip()]
    except TraceError:
        lines = []
    if lines:
        return lines[:count], str(DEFAULT_PROMPTS)
    subjects = ("a red cat", "an old lighthouse", "a cyberpunk city", "a bowl of ramen", "a dragon")
    styles = ("oil painting", "photograph, 35mm", "watercolor", "trending on artstation, 8k", "pixel art")
    generated = [f"{subjects[i % 5]} at dusk, {styles[(i // 5) % 5]}, variant {i}" for i in range(count)]
    return generated, "generated"
