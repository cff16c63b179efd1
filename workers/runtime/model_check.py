"""`reprise models check`: validate the configured models before the workers start.

layout: what `from_pretrained` reads (workers.runtime.loading), a Hugging Face id from the local cache only;
family: Stable Diffusion 1.x/2.x (SDXL refused), VAE latent channels = UNet in_channels, one declared family
is one latent space; scheduler: first-order and, under resume, exact (core.schedulers); resume: `steps` steps
captured at k = steps // 2 and resumed from there end on the same final latent, which makes NIRVANA's hits
correct. Also the decode role's VAE, and the open_clip model when a lookup embeds with it.
No check raises for a broken model: each returns a `Check` (ok, FAIL or skip, with the fix).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from core.params import GenerationParams
from core.schedulers import DIFFUSERS_CLASS, resume_refusal
from core.settings import Settings
from core.vocabulary import BUILTIN_FAMILIES, LAB_ATTRIBUTES, HitPolicy, LookupMode, Role, TextEmbedderKind

CHECK_ROLES = ("large", "small", "decode", "clip")
SUPPORTED_PIPELINES = frozenset({"StableDiffusionPipeline", "StableDiffusionImg2ImgPipeline"})
EXAMPLE_REPO = "stable-diffusion-v1-5/stable-diffusion-v1-5"
# What a pipeline needs and no more: configs, tokenizer, the default (non-variant) safetensors.
DOWNLOAD_INCLUDES = (
    "*.json",
    "tokenizer/*",
    "*/diffusion_pytorch_model.safetensors",
    "text_encoder/model.safetensors",
)
PROBE_PROMPT = "a red lighthouse on a cliff at dusk"
PROBE_SEED = 7
HUB_CACHE = "Hugging Face cache"
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DIFFUSERS_WEIGHTS = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin")
WEIGHT_FILES = {
    "unet": _DIFFUSERS_WEIGHTS,
    "vae": _DIFFUSERS_WEIGHTS,
    "text_encoder": ("model.safetensors", "pytorch_model.bin"),
}
CONFIG_FILES = {
    "unet": "config.json",
    "vae": "config.json",
    "text_encoder": "config.json",
    "tokenizer": "tokenizer_config.json",
    "scheduler": "scheduler_config.json",
}


class Status(StrEnum):
    OK = "ok"
    FAIL = "FAIL"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class Check:
    """One check of one model: `subject` (large, small, decode, clip, families), `name`, the outcome."""

    subject: str
    name: str
    status: Status
    detail: str
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def line(self) -> str:
        return f"{self.status.value:4}  {self.subject:8} {self.name:9} {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "check": self.name,
            "status": self.status.value,
            "detail": self.detail,
            **self.values,
        }


@dataclass(slots=True)
class CheckReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed (skipped ones do not count)."""
        return all(check.status is not Status.FAIL for check in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [check.as_dict() for check in self.checks]}


class Probe(NamedTuple):
    """The resume check's run: T, side in pixels (None: the model's native size), tolerated difference."""

    steps: int
    size: int | None
    tolerance: float


@dataclass(frozen=True, slots=True)
class Located:
    """Where a configured model's files are: a directory, or the problem that there is none."""

    source: str
    directory: Path | None
    how: str
    problem: str | None = None


def download_command(repo: str, local_dir: str | None = None) -> str:
    includes = " ".join(f"--include '{pattern}'" for pattern in DOWNLOAD_INCLUDES)
    target = f" --local-dir {local_dir}" if local_dir else ""
    return f"hf download {repo} {includes}{target}"


def locate(settings: Settings, source: str) -> Located:
    """A built model ('tiny:large'), a local directory, or a Hugging Face id found in the local cache."""
    if source in BUILTIN_FAMILIES:
        from workers.runtime.loading import builtin_path  # builds or assembles it on first use

        return Located(source, Path(builtin_path(settings, source)), f"built model {source}")
    path = Path(source).expanduser()
    if path.is_dir():
        return Located(source, path, "local directory")
    if _HF_ID.match(source) and not path.exists():
        from huggingface_hub import snapshot_download

        try:
            snapshot = snapshot_download(source, local_files_only=True)
        except (OSError, ValueError) as error:  # LocalEntryNotFoundError: not in the cache
            return Located(
                source,
                None,
                "Hugging Face id",
                f"{source}: no such directory, and not in the Hugging Face cache ({type(error).__name__}); "
                f"the workers never download: {download_command(source)}",
            )
        return Located(source, Path(snapshot), HUB_CACHE)
    return Located(
        source,
        None,
        "local directory",
        f"{source}: no such directory; put a model there, e.g. {download_command(EXAMPLE_REPO, source)}",
    )


def _read_json(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def _weights_problem(folder: Path, component: str) -> str | None:
    names = WEIGHT_FILES[component]
    if any((folder / name).is_file() or (folder / f"{name}.index.json").is_file() for name in names):
        return None
    variants = sorted(p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    if variants:  # e.g. only diffusion_pytorch_model.fp16.safetensors: from_pretrained without a variant
        return f"{component}/ has only {', '.join(variants)}; the loader reads {names[0]} (no variant)"
    return f"{component}/ has no weights ({' or '.join(names)})"


def component_problems(directory: Path, component: str) -> list[str]:
    """What is missing of one pipeline component (its folder, config, tokenizer files, weights)."""
    folder = directory / component
    if not folder.is_dir():
        return [f"{component}/ is missing"]
    problems = []
    if not (folder / CONFIG_FILES[component]).is_file():
        problems.append(f"{component}/{CONFIG_FILES[component]} is missing")
    if component == "tokenizer" and not (
        (folder / "tokenizer.json").is_file()
        or all((folder / n).is_file() for n in ("vocab.json", "merges.txt"))
    ):
        problems.append("tokenizer/ has neither tokenizer.json nor vocab.json + merges.txt")
    if component in WEIGHT_FILES and (problem := _weights_problem(folder, component)) is not None:
        problems.append(problem)
    return problems


def pipeline_layout_problems(directory: Path) -> list[str]:
    """Everything a Stable Diffusion pipeline directory lacks for `StableDiffusionPipeline.from_pretrained`
    (the safety checker is never loaded; other components model_index.json lists must be present)."""
    problems = [] if (directory / "model_index.json").is_file() else ["model_index.json is missing"]
    for component in CONFIG_FILES:
        problems += component_problems(directory, component)
    if not problems:
        for name, spec in _read_json(directory / "model_index.json").items():
            listed = isinstance(spec, list) and len(spec) == 2 and spec[0] is not None
            needed = listed and name not in CONFIG_FILES and name != "safety_checker"
            if needed and not (directory / name).is_dir():
                problems.append(f"{name}/ is missing (model_index.json lists {spec[1]})")
    return problems


def layout_check(subject: str, located: Located) -> Check:
    if located.directory is None:
        return Check(subject, "layout", Status.FAIL, located.problem or "not found")
    problems = pipeline_layout_problems(located.directory)
    where = f"{located.directory} ({located.how})"
    if problems:
        hub = located.how == HUB_CACHE
        fix = download_command(
            located.source if hub else EXAMPLE_REPO, None if hub else str(located.directory)
        )
        return Check(subject, "layout", Status.FAIL, f"{where}: {'; '.join(problems)}. Fix: {fix}")
    return Check(subject, "layout", Status.OK, f"{where}: {', '.join(CONFIG_FILES)} complete")


def vae_space(config: dict[str, Any]) -> tuple[int, float]:
    """What makes two VAEs' latents interchangeable, as far as configs tell: channels, scaling factor."""
    return int(config.get("latent_channels", 4)), float(config.get("scaling_factor", 0.18215))


def family_check(subject: str, directory: Path) -> Check:
    """A supported pipeline class, no added conditioning (SDXL), VAE latent channels = UNet in_channels."""
    class_name = str(_read_json(directory / "model_index.json").get("_class_name"))
    unet = _read_json(directory / "unet" / "config.json")
    vae = _read_json(directory / "vae" / "config.json")
    added, in_channels = unet.get("addition_embed_type"), unet.get("in_channels", 4)
    channels, scaling = vae_space(vae)
    refusals = (
        (
            "XL" in class_name or added not in (None, "text"),
            f"{class_name} (unet addition_embed_type={added!r}) is refused: SDXL-style UNets need added "
            "conditioning (pooled text embeddings and size ids) that the runtime does not pass; configure a "
            "Stable Diffusion 1.x/2.x layout model",
        ),
        (
            class_name not in SUPPORTED_PIPELINES,
            f"{class_name} is not supported: configure a {' or '.join(sorted(SUPPORTED_PIPELINES))} model",
        ),
        (
            channels != in_channels,
            f"vae latent_channels={channels} but unet in_channels={in_channels}: the UNet cannot "
            "denoise this VAE's latents (an inpainting UNet takes 9): use a text-to-image model",
        ),
    )
    for refused, why in refusals:
        if refused:
            return Check(subject, "family", Status.FAIL, why)
    native = int(unet.get("sample_size", 64)) * 2 ** (len(vae.get("block_out_channels", [0] * 4)) - 1)
    values = {"latent_channels": channels, "scaling_factor": scaling, "native_size": native}
    detail = f"{class_name}, {channels} latent channels, scaling factor {scaling}, native {native}px"
    return Check(subject, "family", Status.OK, detail, values)


def family_pair_check(settings: Settings, large_vae: dict[str, Any], small_vae: dict[str, Any]) -> Check:
    """Two models declared of one family must have VAEs of one latent space (else a resume of the large
    model's latent by the small one denoises garbage)."""
    large_family, small_family = settings.large_family, settings.small_family
    if large_family != small_family:
        detail = f"different families ({large_family!r}, {small_family!r}): no latent is resumed across them"
        return Check("families", "family", Status.OK, detail)
    large, small = vae_space(large_vae), vae_space(small_vae)
    if large != small:
        detail = (
            f"REPRISE_LARGE_FAMILY = REPRISE_SMALL_FAMILY = {large_family!r} but the VAEs "
            f"differ (latent channels, scaling factor: {large} vs {small}): set "
            "REPRISE_SMALL_FAMILY to another name: their latent spaces differ"
        )
        return Check("families", "family", Status.FAIL, detail)
    detail = f"both {large_family!r}: VAEs agree ({large[0]} latent channels, scaling factor {large[1]})"
    return Check("families", "family", Status.OK, detail)


def scheduler_check(settings: Settings, subject: str, directory: Path) -> Check:
    """REPRISE_SCHEDULER (or, for `pipeline`, the model's own) is a first-order diffusers class and, under
    NIRVANA's resume, one whose resume is exact."""
    import diffusers

    configured = DIFFUSERS_CLASS[settings.scheduler]
    own = str(_read_json(directory / "scheduler" / "scheduler_config.json").get("_class_name"))
    name = configured if configured is not None else own
    cls = getattr(diffusers, name, None)
    where = f"REPRISE_SCHEDULER={settings.scheduler.value} -> {name}"
    if cls is None or not hasattr(cls, "from_config"):
        return Check(subject, "scheduler", Status.FAIL, f"{where}: not a diffusers scheduler class")
    if getattr(cls, "order", 1) != 1:
        return Check(subject, "scheduler", Status.FAIL, f"{where}: evaluates the UNet {cls.order}x per step")
    refusal = resume_refusal(name)
    if refusal is not None and settings.hit_policy is HitPolicy.RESUME:
        return Check(subject, "scheduler", Status.FAIL, f"{where}: {refusal}")
    exact = "resumes exactly" if refusal is None else f"inexact resume, fine: hits {settings.hit_policy}"
    return Check(subject, "scheduler", Status.OK, f"{where}: {exact}", {"scheduler": name})


def resume_check(settings: Settings, role: Role, probe: Probe) -> Check:
    """Generate `steps` steps capturing k = steps // 2, resume from the capture, compare final latents."""
    from workers.runtime.runtime import DiffusionRuntime

    subject, (steps, size, tolerance), k = role.value, probe, max(1, probe.steps // 2)
    try:
        runtime = DiffusionRuntime(settings, role)
        side = size if size is not None else runtime.native_size
        params = GenerationParams(PROBE_PROMPT, seed=PROBE_SEED, steps=steps, width=side, height=side)
        started = time.perf_counter()
        full = runtime.generate(params, capture=[k])
        resumed = runtime.resume(params, full.captured[k], k, family=runtime.family)
        seconds = time.perf_counter() - started
        runtime.release()
    except Exception as error:  # a model that fails to load or run: the check reports it, not raises
        return Check(subject, "resume", Status.FAIL, f"{type(error).__name__}: {error}")
    difference = np.abs(resumed.final_latent.astype(np.float64) - full.final_latent.astype(np.float64))
    worst = float(difference.max())
    values = {"max_abs_diff": worst, "steps": steps, "k": k, "size": side, "seconds": round(seconds, 3)}
    run = f"{steps} steps at {side}px, resumed at k={k}: max |final latent difference| = {worst:.3g}"
    if worst <= tolerance:
        return Check(subject, "resume", Status.OK, f"{run} (<= {tolerance:g})", values)
    if settings.hit_policy is not HitPolicy.RESUME:
        return Check(subject, "resume", Status.OK, f"{run}: not exact, not needed (hits refine)", values)
    why = f"{run} > {tolerance:g}: a resumed hit would not reproduce the run it was cached from"
    return Check(subject, "resume", Status.FAIL, why, values)


def pipeline_checks(settings: Settings, role: Role, probe: Probe) -> tuple[list[Check], Path | None]:
    """layout, family, scheduler and resume of the large or small model; its directory when found."""
    subject = role.value
    located = locate(settings, settings.model_source(subject))
    directory = located.directory
    try:
        checks = [layout_check(subject, located)]
        if directory is not None and checks[0].status is Status.OK:
            checks += [family_check(subject, directory), scheduler_check(settings, subject, directory)]
    except (OSError, ValueError) as error:  # an unreadable config file
        checks = [Check(subject, "layout", Status.FAIL, f"{type(error).__name__}: {error}")]
    if any(check.status is Status.FAIL for check in checks):
        checks.append(Check(subject, "resume", Status.SKIP, "an earlier check failed"))
        return checks, directory if checks[0].status is Status.OK else None
    return [*checks, resume_check(settings, role, probe)], directory


def vae_layout_problems(directory: Path) -> list[str]:
    if not (directory / "config.json").is_file():
        return [f"{directory}/config.json is missing (a VAE directory has its config at the root)"]
    class_name = _read_json(directory / "config.json").get("_class_name")
    if class_name != "AutoencoderKL":
        return [f"config.json says _class_name={class_name!r}; the decode role needs an AutoencoderKL"]
    problem = _weights_problem(directory, "vae")
    return [] if problem is None else [problem.replace("vae/", "the VAE directory", 1)]


def decode_checks(settings: Settings, large_dir: Path | None, *, size: int | None) -> list[Check]:
    """The decode role's VAE: its layout, its latent space against the large model's, one decode."""
    if settings.decode_model is None:
        if large_dir is None:
            return [Check("decode", "layout", Status.SKIP, "the large model's vae/, not found (see large)")]
        located = Located(str(large_dir / "vae"), large_dir / "vae", "the large model's vae/")
    else:
        located = locate(settings, settings.decode_model)
    if located.directory is None:
        return [Check("decode", "layout", Status.FAIL, located.problem or "not found")]
    problems = vae_layout_problems(located.directory)
    where = f"{located.directory} ({located.how})"
    if problems:
        return [Check("decode", "layout", Status.FAIL, f"{where}: {'; '.join(problems)}")]
    checks = [Check("decode", "layout", Status.OK, f"{where}: AutoencoderKL config and weights")]
    if large_dir is not None and settings.decode_model is not None:
        ours = vae_space(_read_json(located.directory / "config.json"))
        theirs = vae_space(_read_json(large_dir / "vae" / "config.json"))
        status = Status.OK if ours == theirs else Status.FAIL
        detail = f"latent channels, scaling factor {ours}; the large model's VAE: {theirs}"
        checks.append(Check("decode", "family", status, detail))
    if all(check.status is Status.OK for check in checks):
        channels = vae_space(_read_json(located.directory / "config.json"))[0]
        checks.append(_decode_run_check(settings, channels, size=size))
    return checks


def _decode_run_check(settings: Settings, channels: int, *, size: int | None) -> Check:
    from workers.runtime.runtime import DiffusionRuntime

    try:
        runtime = DiffusionRuntime(settings, Role.DECODE)
        side = size if size is not None else runtime.native_size
        started = time.perf_counter()
        latent = np.random.default_rng(PROBE_SEED).standard_normal((channels, side // 8, side // 8))
        image = runtime.decode(latent.astype(np.float32), family=runtime.family).image
        seconds = time.perf_counter() - started
        runtime.release()
    except Exception as error:  # reported, not raised
        return Check("decode", "decode", Status.FAIL, f"{type(error).__name__}: {error}")
    detail = f"a {channels}x{side // 8}x{side // 8} latent to a {image.width}x{image.height} image"
    return Check("decode", "decode", Status.OK, f"{detail} in {seconds:.2f}s", {"seconds": round(seconds, 3)})


def clip_checks(settings: Settings) -> list[Check]:
    """The open_clip model, when a lookup embeds with it: known name, weights cached, dimensions."""
    image_lookup = settings.lookup_mode is LookupMode.TEXT_TO_IMAGE
    clip_text = settings.text_embedder is TextEmbedderKind.OPEN_CLIP
    if not (image_lookup or clip_text):
        why = f"not used (REPRISE_LOOKUP_MODE=text, REPRISE_TEXT_EMBEDDER={settings.text_embedder.value})"
        return [Check("clip", "weights", Status.SKIP, why)]
    if settings.open_clip_model is None:
        detail = "the tiny random open_clip (its similarities mean nothing): set REPRISE_OPEN_CLIP_MODEL"
        return [Check("clip", "weights", Status.OK, detail)]
    if settings.open_clip_model == LAB_ATTRIBUTES:
        detail = "the quality lab's attribute space (prompts parsed, images read by the second judge)"
        return [Check("clip", "weights", Status.OK, detail)]
    import open_clip

    name = settings.open_clip_model
    if name not in open_clip.list_models():
        return [Check("clip", "weights", Status.FAIL, f"REPRISE_OPEN_CLIP_MODEL={name!r}: no such model")]
    checks = [_clip_weights_check(name, settings.open_clip_pretrained)]
    embed_dim = int(open_clip.get_model_config(name)["embed_dim"])
    wanted = [("REPRISE_IMAGE_EMBEDDING_DIM", settings.image_embedding_dim)] if image_lookup else []
    wanted += [("REPRISE_TEXT_EMBEDDING_DIM", settings.text_embedding_dim)] if clip_text else []
    wrong = [f"{variable}={value}" for variable, value in wanted if value != embed_dim]
    fix = f" but {', '.join(wrong)}: set {embed_dim}" if wrong else ", as configured"
    detail = f"{name} embeds in {embed_dim} dimensions{fix}"
    return [*checks, Check("clip", "dims", Status.FAIL if wrong else Status.OK, detail)]


def _clip_weights_check(name: str, pretrained: str | None) -> Check:
    import open_clip
    from huggingface_hub import try_to_load_from_cache

    if pretrained is None:
        detail = f"REPRISE_OPEN_CLIP_PRETRAINED is unset: {name} would be random; set a tag (openai)"
        return Check("clip", "weights", Status.FAIL, detail)
    if Path(pretrained).expanduser().is_file():
        return Check("clip", "weights", Status.OK, f"{name}: checkpoint {pretrained}")
    tags = open_clip.list_pretrained_tags_by_model(name)
    if pretrained not in tags:
        detail = f"{pretrained!r} is neither a file nor a tag of {name} (tags: {', '.join(tags)})"
        return Check("clip", "weights", Status.FAIL, detail)
    hub = str(open_clip.get_pretrained_cfg(name, pretrained).get("hf_hub", ""))
    if not hub:
        return Check("clip", "weights", Status.SKIP, f"{name}/{pretrained} has no Hub copy to look up")
    repo, filename = os.path.split(hub)  # as open_clip reads it: 'org/name/' names the default files
    candidates = [filename] if filename else ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
    for candidate in candidates:
        cached = try_to_load_from_cache(repo, candidate)
        if isinstance(cached, str):
            return Check("clip", "weights", Status.OK, f"{name}/{pretrained}: {cached}")
    fix = f"hf download {repo} --include 'open_clip_*'"
    return Check("clip", "weights", Status.FAIL, f"{name}/{pretrained}: {repo} is not in the cache: {fix}")


def check_models(
    settings: Settings,
    roles: Collection[str] = CHECK_ROLES,
    *,
    steps: int = 2,
    size: int | None = None,
    tolerance: float = 1e-5,
) -> CheckReport:
    """Every check of the roles asked for (CHECK_ROLES), in order; the families check when both the large
    and the small model are checked and found."""
    if steps < 2:
        raise ValueError("steps must be at least 2: a resume needs a step to start from and one to run")
    report = CheckReport()
    found: dict[str, Path | None] = {}
    for role in (Role.LARGE, Role.SMALL):
        if role.value in roles:
            checks, found[role.value] = pipeline_checks(settings, role, Probe(steps, size, tolerance))
            report.checks += checks
    if (large_dir := found.get("large")) is not None and (small_dir := found.get("small")) is not None:
        large_vae, small_vae = (_read_json(d / "vae" / "config.json") for d in (large_dir, small_dir))
        report.checks.append(family_pair_check(settings, large_vae, small_vae))
    if "decode" in roles:
        large_dir = found["large"] if "large" in found else _found_large(settings)
        report.checks += decode_checks(settings, large_dir, size=size)
    if "clip" in roles:
        report.checks += clip_checks(settings)
    return report


def _found_large(settings: Settings) -> Path | None:
    directory = locate(settings, settings.model_source("large")).directory
    return directory if directory is not None and (directory / "vae").is_dir() else None
