"""Start-up checks of the whole configuration: the k table (NIRVANA 5.3.1) suits the lookup mode and says
what it was profiled with; the scheduler can resume exactly under NIRVANA's resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.errors import SettingsError, ThresholdTableError
from core.schedulers import SchedulerName
from core.settings import load_settings
from core.vocabulary import LAB_ATTRIBUTES, HitPolicy, LookupMode, TextEmbedderKind
from jobs.configuration import check_configuration
from jobs.policies.k_selection import (
    LAB_MINILM,
    LAB_MINILM_LARGE,
    LAB_MINILM_REFINE,
    LAB_T2I,
    MINILM,
    MODM_T2I,
    NIRVANA_T2T,
    ThresholdTable,
    configured_table,
    embedder_mismatch,
    embedder_tag,
    table_for,
)

PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def _settings(**overrides: Any) -> Any:
    return load_settings(**overrides)


@pytest.mark.parametrize(
    ("mode", "preset"), [(LookupMode.TEXT_TO_TEXT, NIRVANA_T2T), (LookupMode.TEXT_TO_IMAGE, MODM_T2I)]
)
def test_the_default_table_is_the_lookup_modes_own(mode: LookupMode, preset: object) -> None:
    assert table_for("auto", mode) is preset
    assert configured_table(_settings(lookup_mode=mode, model_set="tiny")) is preset


def test_on_the_lab_models_the_default_table_is_the_one_profiled_on_them() -> None:
    """`auto` on the lab's models is the table `reprise profile k` wrote on exactly them, in the space their
    lookups embed in (no borrowed-table warning): lab-t2i for the default image lookups in the lab's
    attribute space, lab-minilm for MiniLM text lookups; other embedders keep the papers' presets."""
    default = _settings()
    assert (default.lookup_mode, default.open_clip_model) == (LookupMode.TEXT_TO_IMAGE, LAB_ATTRIBUTES)
    assert default.hit_policy is HitPolicy.REFINE  # MoDM 5.1: a hit refines the image it found
    assert configured_table(default) is LAB_T2I
    assert check_configuration(default) == []
    assert configured_table(_settings(lookup_mode=LookupMode.TEXT_TO_TEXT)) is LAB_MINILM
    assert check_configuration(_settings(lookup_mode=LookupMode.TEXT_TO_TEXT)) == []
    clip_text = _settings(
        lookup_mode=LookupMode.TEXT_TO_TEXT, text_embedder="open_clip", text_embedding_dim=64
    )
    assert configured_table(clip_text) is NIRVANA_T2T


def test_only_the_lab_models_default_to_image_lookups_and_what_is_set_stays() -> None:
    tiny = _settings(model_set="tiny")
    assert (tiny.lookup_mode, tiny.hit_policy, tiny.open_clip_model) == (
        LookupMode.TEXT_TO_TEXT,
        HitPolicy.RESUME,
        None,
    )
    resume = _settings(hit_policy=HitPolicy.RESUME)
    assert (resume.lookup_mode, resume.hit_policy) == (LookupMode.TEXT_TO_IMAGE, HitPolicy.RESUME)
    text = _settings(lookup_mode=LookupMode.TEXT_TO_TEXT)
    assert (text.hit_policy, text.open_clip_model) == (HitPolicy.RESUME, None)
    clip = _settings(lookup_mode=LookupMode.TEXT_TO_IMAGE, open_clip_model="ViT-L-14")
    assert clip.open_clip_model == "ViT-L-14" and configured_table(clip) is MODM_T2I


@pytest.mark.parametrize(
    ("preset", "profile"),
    [(LAB_MINILM, "resume-small"), (LAB_MINILM_LARGE, "resume-large"), (LAB_MINILM_REFINE, "refine-small")],
)
def test_the_lab_presets_are_the_tables_their_shipped_profiles_wrote(
    preset: ThresholdTable, profile: str
) -> None:
    report = json.loads((PROFILES / f"{profile}.json").read_text())
    assert [(row.similarity, row.k) for row in preset.rows] == [
        (row["min_similarity"], row["k"]) for row in report["table"]
    ]
    assert preset.profiled_with == report["embedder"] == MINILM and profile in preset.source


def test_the_lab_image_table_holds_its_tolerance_on_the_profile_it_names() -> None:
    """lab-t2i's rows are read off lab/profiles/image-refine-small.json, a profile of MoDM's route in the
    lab's attribute space: the mean drop of the profiled pairs above each row, at the row's k, is within
    NIRVANA's 0.02, and the pairs below the table lose more (else the table could reach lower)."""
    report = json.loads((PROFILES / "image-refine-small.json").read_text())
    assert (report["embedder"], report["mode"], report["hit_operation"]) == (
        LAB_ATTRIBUTES,
        "image",
        "refine",
    )
    assert (
        report["models"] == {"large": "lab:large", "hit": "lab:small"}
        and "image-refine-small" in LAB_T2I.source
    )
    pairs = report["measurements"]
    for row in LAB_T2I.rows:
        above = [
            pair["fresh"] - pair["hits"][str(row.k)] for pair in pairs if pair["similarity"] > row.similarity
        ]
        assert len(above) >= 30 and sum(above) / len(above) <= 0.02
    below = [
        pair["fresh"] - pair["hits"][str(LAB_T2I.rows[-1].k)]
        for pair in pairs
        if LAB_T2I.lowest_similarity - 0.1 < pair["similarity"] <= LAB_T2I.lowest_similarity
    ]
    assert sum(below) / len(below) > 0.02


def test_image_lookups_hit_by_default() -> None:
    """CLIP text-to-image cosines of matching pairs lie in 0.25-0.35 (MoDM 5.2): the default table in
    image mode must let them hit, which nirvana-t2t's floor of 0.65 never did."""
    table = configured_table(_settings(lookup_mode=LookupMode.TEXT_TO_IMAGE, model_set="tiny"))
    assert table.is_match(0.30) and not NIRVANA_T2T.is_match(0.30)


@pytest.mark.parametrize(
    ("spec", "mode"),
    [
        ("nirvana-t2t", LookupMode.TEXT_TO_IMAGE),
        ("modm-t2i", LookupMode.TEXT_TO_TEXT),
        ("0.9:20,0.7:5", LookupMode.TEXT_TO_IMAGE),  # no CLIP text-image pair reaches 0.7
        ("0.5:10,0.3:5", LookupMode.TEXT_TO_TEXT),  # unrelated prompts pass 0.3
    ],
)
def test_a_table_that_does_not_suit_the_mode_is_refused_with_the_fix(spec: str, mode: LookupMode) -> None:
    with pytest.raises(ThresholdTableError, match="REPRISE_K_TABLE=auto"):
        table_for(spec, mode)
    with pytest.raises(SettingsError, match="REPRISE_K_TABLE"):
        check_configuration(_settings(k_table=spec, lookup_mode=mode, model_set="tiny"))


def test_plausible_custom_tables_are_taken() -> None:
    assert table_for("0.9:20,0.7:10", LookupMode.TEXT_TO_TEXT).lowest_similarity == 0.7
    assert table_for(">=0.32:20,>=0.26:5", LookupMode.TEXT_TO_IMAGE).ks == (20, 5)


def test_a_table_profiled_with_another_embedder_is_a_warning_naming_the_profiler() -> None:
    minilm = embedder_tag(TextEmbedderKind.MINILM, None, LookupMode.TEXT_TO_TEXT)
    assert minilm == MINILM
    warning = embedder_mismatch(NIRVANA_T2T, minilm)
    assert warning is not None and "open_clip:ViT-L-14" in warning and "reprise profile k" in warning
    assert (
        embedder_mismatch(
            NIRVANA_T2T, embedder_tag(TextEmbedderKind.OPEN_CLIP, "ViT-L-14", LookupMode.TEXT_TO_TEXT)
        )
        is None
    )
    # image lookups embed the prompt with open_clip whatever the text embedder
    assert embedder_tag(TextEmbedderKind.MINILM, "ViT-L-14", LookupMode.TEXT_TO_IMAGE) == "open_clip:ViT-L-14"
    assert any("profiled with" in w for w in check_configuration(_settings(model_set="tiny")))
    custom = _settings(
        k_table="0.9:20,0.7:10", k_table_profiled_with=MINILM, lookup_mode=LookupMode.TEXT_TO_TEXT
    )
    assert check_configuration(custom) == []


@pytest.mark.parametrize(
    ("scheduler", "refused"),
    [
        (SchedulerName.DDIM, False),
        (SchedulerName.EULER, False),
        (SchedulerName.PNDM, True),
        (SchedulerName.DPM_PP, True),
        (SchedulerName.EULER_ANCESTRAL, True),
        (SchedulerName.LMS, True),
        (SchedulerName.PIPELINE, False),  # checked when the model loads
    ],
)
def test_under_resume_only_exactly_resuming_schedulers_start(scheduler: SchedulerName, refused: bool) -> None:
    settings = _settings(scheduler=scheduler, hit_policy=HitPolicy.RESUME, k_table_profiled_with=None)
    if refused:
        with pytest.raises(SettingsError, match="cannot resume a cached latent exactly"):
            check_configuration(settings)
    else:
        check_configuration(settings)
    check_configuration(_settings(scheduler=scheduler, hit_policy=HitPolicy.REFINE))  # refine takes any


def test_the_command_line_refuses_a_bad_combination_before_doing_anything() -> None:
    env = {"REPRISE_SCHEDULER": "pndm", "REPRISE_HIT_POLICY": "resume", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "reprise", "keys", "--help"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "REPRISE_SCHEDULER=pndm" in done.stderr and "REPRISE_HIT_POLICY=refine" in done.stderr
