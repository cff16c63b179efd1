"""The tiny random models: built offline, reproducible, one shared VAE, loadable like real models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import typer
from safetensors.torch import load_file
from typer.testing import CliRunner

from core.params import VAE_SCALE_FACTOR
from core.settings import Settings
from reprise.commands.models import models_app
from workers.runtime import DiffusionRuntime, TinyModelPaths, ensure_tiny_models
from workers.runtime import tiny as tiny_module
from workers.runtime.tiny import TINY_SIZE, build_tiny_models, tiny_models_root, tiny_video_model_dir

WEIGHTS = "diffusion_pytorch_model.safetensors"


def _same_tensors(first: Path, second: Path) -> bool:
    a, b = load_file(str(first)), load_file(str(second))
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def test_large_and_small_share_one_vae_but_not_the_unet(tiny_paths: TinyModelPaths) -> None:
    assert _same_tensors(tiny_paths.large / "vae" / WEIGHTS, tiny_paths.small / "vae" / WEIGHTS)
    large_unet = load_file(str(tiny_paths.large / "unet" / WEIGHTS))
    small_unet = load_file(str(tiny_paths.small / "unet" / WEIGHTS))
    assert sum(t.numel() for t in large_unet.values()) > sum(t.numel() for t in small_unet.values())


def test_vae_downsamples_by_eight_like_stable_diffusion(large: DiffusionRuntime) -> None:
    vae = large._vae
    assert len(vae.config.block_out_channels) == 4
    pixels = torch.zeros(1, 3, TINY_SIZE, TINY_SIZE)
    with torch.inference_mode():
        latent = vae.encode(pixels).latent_dist.mode()
    assert tuple(latent.shape) == (1, 4, TINY_SIZE // VAE_SCALE_FACTOR, TINY_SIZE // VAE_SCALE_FACTOR)
    assert large.native_size == TINY_SIZE


def test_tokenizer_covers_any_text_without_unknown_tokens(large: DiffusionRuntime) -> None:
    tokenizer = large._pipe.tokenizer
    ids = tokenizer("Ünïcödé prompt, 123 — ok?").input_ids
    assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.unk_token_id not in ids[1:-1]
    assert tokenizer.model_max_length == 77


def test_ensure_is_idempotent(tiny_settings: Settings, tiny_paths: TinyModelPaths) -> None:
    marker = tiny_paths.root / "tiny-models.json"
    before = marker.stat().st_mtime_ns
    again = ensure_tiny_models(tiny_settings)
    assert again == tiny_paths
    assert marker.stat().st_mtime_ns == before
    # Nothing but the versioned sets live in the models directory: no leftover staging dirs (a build
    # stages in a hidden sibling, workers.runtime.tiny), and the video model only where a test built it.
    base = tiny_settings.tiny_models_dir
    names = {p.name for p in base.iterdir() if p.name.lstrip(".").startswith("tiny-")}
    assert tiny_paths.root.name in names
    assert names <= {tiny_paths.root.name, tiny_video_model_dir(base).name}


def test_build_is_reproducible(tmp_path: Path, tiny_paths: TinyModelPaths) -> None:
    rebuilt = build_tiny_models(tmp_path / "again")
    for part in ("unet", "vae"):
        assert _same_tensors(tiny_paths.large / part / WEIGHTS, rebuilt.large / part / WEIGHTS)
    assert _same_tensors(tiny_paths.clip_checkpoint, rebuilt.clip_checkpoint)


def test_failed_build_leaves_nothing_behind(
    tmp_path: Path, tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(root: Path) -> TinyModelPaths:
        (root / "large").mkdir()
        raise OSError("disk full")

    monkeypatch.setattr(tiny_module, "build_tiny_models", broken)
    with pytest.raises(OSError, match="disk full"):
        ensure_tiny_models(tiny_settings, out=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_concurrent_winner_is_used(
    tmp_path: Path, tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes build at once: the one whose rename fails uses the other's complete set."""

    def build_while_another_process_finishes(root: Path) -> TinyModelPaths:
        winner = tiny_models_root(tmp_path)
        (winner / "large").mkdir(parents=True)
        (winner / "tiny-models.json").write_text("{}")
        return TinyModelPaths.under(root)

    monkeypatch.setattr(tiny_module, "build_tiny_models", build_while_another_process_finishes)
    paths = ensure_tiny_models(tiny_settings, out=tmp_path)
    assert paths.root == tiny_models_root(tmp_path) and paths.complete
    assert [p.name for p in tmp_path.iterdir()] == [paths.root.name]


def test_models_tiny_command_prints_the_paths(tiny_settings: Settings, tiny_paths: TinyModelPaths) -> None:
    cli = typer.Typer()
    cli.add_typer(models_app, name="models")  # as reprise/cli.py mounts it
    result = CliRunner().invoke(cli, ["models", "tiny", "--out", str(tiny_settings.tiny_models_dir)])
    assert result.exit_code == 0, result.output
    assert str(tiny_paths.large) in result.output
    assert str(tiny_paths.small) in result.output
