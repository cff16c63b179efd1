"""`reprise lab ...` and `reprise profile k`: the quality lab's judge, trace and threshold profiler."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from bench import ARRIVALS_DIR
from core.settings import get_settings
from core.vocabulary import LookupMode

lab_app = typer.Typer(help="The quality lab: validate the judge, write a lab trace.", no_args_is_help=True)
profile_app = typer.Typer(
    help="Profiling: NIRVANA's similarity-to-k table (Algorithm 1).", no_args_is_help=True
)

DEFAULT_ARRIVALS = ARRIVALS_DIR / "azure-shaped-2to16qps.csv"  # bench/data/README.md


@lab_app.command("judge")
def judge_command(
    images: int = typer.Option(2000, "--images", min=10, help="Held-out true renders to read."),
    generated: int = typer.Option(
        32, "--generated", min=0, help="Held-out captions lab:large and lab:small each draw (0: none)."
    ),
    steps: int = typer.Option(20, "--steps", min=1, help="DDIM steps of those generations."),
    rival_steps: int = typer.Option(
        0,
        "--rival-steps",
        min=0,
        help="Also train a rival of the judge's own architecture and recipe for this many steps (the "
        "judge's 500 to compare like with like; 0: none) and report its agreement on the same images.",
    ),
    json_out: Path | None = typer.Option(
        None,
        "--json",
        help="Write {attribute_accuracy, blurred_accuracy, generated_agreement, verdict_agreement, "
        "scores_per_model, rival, ...}.",
    ),
) -> None:
    """Validate the judge: attribute accuracy on held-out true renders (a seed no training used), on
    blurred and noisy ones, and its agreement with the second judge (lab.judge_b) on the lab models'
    images of held-out captions, and with a rival of its own kind where asked (lab.validation); exit 1
    below a floor (lab.judge_floors.FLOORS)."""
    from lab.judge import HELDOUT_SEED, Judge, heldout_accuracy
    from lab.judge_floors import FLOORS, refusal
    from lab.models import ensure_lab_models
    from lab.validation import degraded_accuracy

    paths = ensure_lab_models(get_settings())
    judge = Judge.load(paths.judge, validated=False)
    report: dict[str, Any] = {
        "lab_weights": _provenance(paths.weights),
        "attribute_accuracy": heldout_accuracy(judge, images),
        **degraded_accuracy(judge, images),
        "heldout_images": images,
        "seed": HELDOUT_SEED,
    }
    if generated:
        report |= _generated_agreement(
            judge, paths, generated, steps, rival_steps=rival_steps, heldout=images
        )
    typer.echo(
        f"attribute accuracy {report['attribute_accuracy']:.4f} on {images} held-out images (seed "
        f"{HELDOUT_SEED}); blurred {report['blurred_accuracy']:.4f}, noisy {report['noisy_accuracy']:.4f}"
    )
    if generated:
        _echo_agreements(report)
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2) + "\n")
    measured = {"heldout_accuracy": report["attribute_accuracy"], **report}
    reason = refusal({name: measured.get(name, FLOORS[name]) for name in FLOORS})
    if reason is not None:
        typer.echo(f"{reason}: the judge must not judge", err=True)
        raise typer.Exit(1)


def _echo_agreements(report: dict[str, Any]) -> None:
    """The agreements on generated images, the rival's and the autoencoder's round trip's, a line each."""
    typer.echo(
        f"agreement with the second judge on {report['generated_images']} generated images: "
        f"{report['generated_agreement']:.4f} {report['agreement_per_model']}; on the verdicts "
        f"a score counts {report['verdict_agreement']:.4f}; mean scores (judge, second) "
        f"{report['scores_per_model']}, correlated {report['score_correlation']}"
    )
    if "rival" in report:
        rival = report["rival"]
        typer.echo(
            f"a rival of the judge's own kind (seed {rival['seed']}, {rival['steps']} steps, "
            f"held out {rival['heldout_accuracy']:.4f}) agrees with it on "
            f"{rival['generated_agreement']:.4f} of the readings {rival['agreement_per_model']}, "
            f"{rival['verdict_agreement']:.4f} of the verdicts"
        )
    trip = report["round_trip"]
    agreed = ", ".join(
        f"{name[len('agreement_') :]} {value:.4f}"
        for name, value in trip.items()
        if name.startswith("agreement_")
    )
    typer.echo(
        f"the autoencoder's round trip of the {trip['images']} captions' true renders: the judge "
        f"reads {trip['score']:.4f} of their attributes; agreement {agreed}"
    )


def _generated_agreement(
    judge: Any, paths: Any, count: int, steps: int, *, rival_steps: int, heldout: int
) -> dict[str, Any]:
    """The two judges' agreement on lab:large's and lab:small's images of `count` held-out captions,
    and the rival's where `rival_steps` (trained with the lab's pinned kernels, as the judge was)."""
    from lab import validation
    from lab.build import pinned_cpu_kernels
    from lab.generation import GENERATORS, captioned_scenes, generate
    from lab.judge import Judge
    from lab.training import deterministic, load_vae

    second = Judge.load(paths.weights / "judge-b", validated=False)
    scenes, captions, renders = captioned_scenes(count, validation.AGREEMENT_SEED)
    images = {name: generate(paths.pipeline(name), captions, steps=steps) for name in GENERATORS}
    report = {
        **validation.agreement_figures(validation.agreement(judge, second, scenes, images)),
        "generated_images": sum(len(batch) for batch in images.values()),
        "generation_steps": steps,
        "agreement_seed": validation.AGREEMENT_SEED,
        "blur_radius": validation.BLUR_RADIUS,
        "noise_sigma": validation.NOISE_SIGMA,
    }
    others = {"judge_b": second}
    if rival_steps:
        with pinned_cpu_kernels(), deterministic():
            others["rival"] = validation.rival(rival_steps)
        report["rival"] = {"seed": validation.RIVAL_SEED, "steps": rival_steps} | validation.rival_agreement(
            judge, others["rival"], scenes, images, heldout=heldout
        )
    round_trips = validation.round_trips(load_vae(paths.weights / "vae-a"), renders)
    report["round_trip"] = validation.round_trip_agreement(judge, others, scenes, round_trips)
    return report


@lab_app.command("quality")
def quality_command(
    models: str = typer.Option("lab:large,lab:small,lab:small-b", "--models", help="Models to compare."),
    prompts: int = typer.Option(500, "--prompts", min=2, help="Lab prompts each model draws."),
    guidance: float = typer.Option(7.5, "--guidance", help="Classifier-free guidance."),
    seed: int = typer.Option(1, "--seed", help="Seed of the prompts."),
    steps: int | None = typer.Option(
        None, "--steps", min=1, help="DDIM steps of every model (default REPRISE_STEPS): a few-step variant."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report to this file."),
    video: bool = typer.Option(
        False,
        "--video",
        help="Judge the video model (REPRISE_VIDEO_MODEL; lab:video, the lab's trained one, when it is the "
        "tiny random one) on moving-scene captions with the video judge; --models is ignored.",
    ),
) -> None:
    """Judge each model's fresh generations of the same lab prompts: mean and 5th-percentile quality,
    the share showing every attribute, and the Frechet distance to true renders (judge features)."""
    from bench.quality.compare import compare_models
    from lab.models import lab_weights

    settings = get_settings()
    if video:
        _video_quality(prompts=prompts, seed=seed, guidance=guidance, steps=steps, json_out=json_out)
        return
    names = [name.strip() for name in models.split(",") if name.strip()]
    report = compare_models(
        settings, names, prompts=prompts, seed=seed, guidance=guidance, steps=steps, log=lambda _: None
    )
    report["lab_weights"] = _provenance(lab_weights(settings))
    rows = {"true renders": report["true_renders"], "chance": report["chance"], **report["models"]}
    for name, row in rows.items():
        typer.echo(
            f"{name:14} quality {row['mean']:.3f} (p5 {row['p5']:.2f}, "
            f"all attributes {row['all_attributes']:.2f}) frechet {row['frechet_distance']:.2f}"
        )
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2) + "\n")


def _provenance(weights: Path) -> dict[str, Any]:
    """Which trained set measured: its manifest's digest and its recipe's name in
    lab.recipes.RECIPES (docs/results/README.md, "Lab weights")."""
    from lab.recipes import recipe_name

    manifest = json.loads((weights / "manifest.json").read_text())
    return {"recipe": recipe_name(manifest), "digest": manifest["digest"]}


def _video_quality(
    *, prompts: int, seed: int, guidance: float, steps: int | None, json_out: Path | None
) -> None:
    from bench.quality.video import compare_video
    from workers.runtime.tiny import TINY_VIDEO_FAMILY
    from workers.runtime.video import LAB_VIDEO_MODEL

    settings = get_settings()
    if settings.video_model_name == TINY_VIDEO_FAMILY:
        settings = settings.model_copy(update={"video_model": LAB_VIDEO_MODEL})
    report = compare_video(
        settings, prompts=prompts, seed=seed, guidance=guidance, steps=steps, log=typer.echo
    )
    rows = {
        "true renders": report["true_renders"],
        "chance": report["chance"],
        report["model"]: report["generated"],
    }
    for name, row in rows.items():
        low, high = row["interval_95"]
        typer.echo(
            f"{name:14} quality {row['mean']:.3f} (95% {low:.3f}..{high:.3f}, p5 {row['p5']:.2f}, "
            f"all attributes {row['all_attributes']:.2f})"
        )
    rates = ", ".join(f"{name} {rate:.2f}" for name, rate in report["generated"]["attributes"].items())
    typer.echo(f"read on {report['model']}'s videos: {rates}")
    judged = report["judge_on_generated"]
    if judged["agreement"] is not None:
        typer.echo(
            f"motion head against the colour tracker on generated videos: {judged['agreement']:.2f} "
            f"({judged['tracked']} of {judged['videos']} tracked; the tracker reads "
            f"{report['tracker_on_true_renders']:.2f} of true renders right)"
        )
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2) + "\n")


@lab_app.command("trace")
def trace_command(
    out: Path = typer.Option(..., "--out", help="Directory for prompts.txt and arrivals.csv."),
    arrivals: Path = typer.Option(DEFAULT_ARRIVALS, "--arrivals", help="CSV of arrival_ms,prompt_idx."),
    scenes: int = typer.Option(1500, "--scenes", min=1, help="Distinct scenes in the pool."),
    zipf: float = typer.Option(1.0, "--zipf", min=0.0, help="Zipf exponent over scene ranks."),
    seed: int = typer.Option(0, "--seed", help="Seed of the pool, the draws and the captions."),
) -> None:
    """Write a lab trace: Zipf-distributed scenes, each request a fresh paraphrase, real arrival times."""
    from lab.trace import lab_trace, read_arrival_times

    if not arrivals.is_file():
        typer.echo(
            f"no arrivals file at {arrivals}: pass --arrivals PATH (arrival_ms,prompt_idx lines)", err=True
        )
        raise typer.Exit(2)
    trace = lab_trace(read_arrival_times(arrivals), scenes=scenes, zipf=zipf, seed=seed)
    prompts, times = trace.write(out)
    distinct = len(set(trace.scene_of))
    typer.echo(f"{len(trace.prompts)} requests over {distinct} scenes: {prompts}, {times}")
    typer.echo(f"replay or simulate with --trace {prompts} --arrivals {times} --process file --order trace")


@profile_app.command("k")
def profile_k_command(
    models: str | None = typer.Option(None, "--models", help="LARGE,HIT models (default: large,small)."),
    embedder: str | None = typer.Option(
        None, "--embedder", help="minilm or open_clip (default: configured)."
    ),
    prompts: int = typer.Option(320, "--prompts", min=8, help="Query/cached prompt pairs to profile."),
    prompts_file: Path | None = typer.Option(
        None, "--prompts-file", help="Real models: profile each prompt of this file against its nearest one."
    ),
    ks: str | None = typer.Option(None, "--k", help="K values, e.g. 5,10,15,20,25 (default: capture steps)."),
    tolerance: float = typer.Option(0.02, "--tolerance", min=0.0, help="Allowed mean quality drop."),
    mode: LookupMode = typer.Option(LookupMode.TEXT_TO_TEXT, "--mode", help="Similarity: text or image."),
    hit: str | None = typer.Option(
        None, "--hit", help="resume or refine (default: resume for text, refine for image)."
    ),
    guidance: float = typer.Option(7.5, "--guidance", help="Classifier-free guidance of every generation."),
    seed: int = typer.Option(0, "--seed", help="Seed of the lab's pairs."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write {table, embedder, models, tolerance, ...}."
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write the quality-drop-vs-similarity figure (PNG)."
    ),
    from_report: Path | None = typer.Option(
        None, "--from", help="Recompute the table of an earlier --json at --tolerance (no generation)."
    ),
) -> None:
    """NIRVANA Algorithm 1: generate hits at every K from similar cached prompts, judge them against fresh
    generations, and write the similarity-to-k table that keeps the mean drop within --tolerance."""
    from bench.quality.profiling import ProfileOptions, run_profile
    from core.vocabulary import TextEmbedderKind

    settings = get_settings()
    if embedder is not None:
        settings = settings.model_copy(update={"text_embedder": TextEmbedderKind(embedder)})
    if hit not in (None, "resume", "refine"):
        typer.echo(f"--hit {hit!r}: use resume or refine", err=True)
        raise typer.Exit(2)
    large, _, hit_model = (
        models or f"{settings.model_source('large')},{settings.model_source('small')}"
    ).partition(",")
    k_values = tuple(int(k) for k in ks.split(",")) if ks else tuple(settings.capture_steps)
    options = ProfileOptions(
        large=large.strip(),
        hit=(hit_model or large).strip(),
        pairs=prompts,
        ks=k_values,
        tolerance=tolerance,
        mode=mode,
        steps=settings.steps,
        guidance=guidance,
        seed=seed,
        prompts_file=prompts_file,
        hit_operation=hit,
    )
    if from_report is not None:
        from bench.quality.profiling import retabled

        result = retabled(json.loads(from_report.read_text()), tolerance)
    else:
        result = run_profile(settings, options, log=typer.echo)
    _report_profile(result, tolerance, json_out, plot)


def _report_profile(
    result: dict[str, Any], tolerance: float, json_out: Path | None, plot: Path | None
) -> None:
    """Print the table (or why there is none), write its JSON and figure."""
    from bench.quality.profiling import write_report

    for row in result["table"]:
        typer.echo(f"similarity > {row['min_similarity']:.3f}  ->  k = {row['k']}")
    if result["table"]:
        typer.echo(f"use it: REPRISE_K_TABLE='{table_spec(result['table'])}'  ({result['seconds']:.0f} s)")
    else:
        typer.echo(
            f"no k keeps the mean quality drop within {tolerance} at any similarity on these models: a cache "
            "would cost that much quality; see the curve (--plot), or state a looser --tolerance"
        )
    if json_out is not None:
        write_report(json_out, result)
    if plot is not None:
        from bench.quality.plots import plot_profile

        plot_profile(result, plot)


def table_spec(rows: list[dict[str, float]]) -> str:
    return ",".join(f"{row['min_similarity']:g}:{int(row['k'])}" for row in rows)
