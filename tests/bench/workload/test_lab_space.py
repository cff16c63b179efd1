"""The lab's attribute space in simulation: queries are the service's own vectors, an entry is found by
a drawn reading of its image, and a simulated run of the lab's default looks images up there with the
profile of that route."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.run.costs import StepCosts
from bench.run.profiles import build_profile
from bench.sim.config import SimConfig
from bench.sim.simulate import run_simulation
from bench.workload.lab_space import (
    lab_space_embeddings,
    profiled_readings,
    reading_record,
    simulated_reading,
)
from bench.workload.trace import ArrivalSpec, build_workload, load_prompts
from core.settings import Settings, load_settings
from core.vocabulary import LAB_ATTRIBUTES, HitPolicy, LookupMode
from jobs.policies.k_selection import PRESETS
from lab.captions import caption, parse
from lab.world import sample_scene
from workers.runtime.embedders.factory import build_image_embedder

DIM = 64


def _trace(tmp_path: Path, count: int, *, repeat: bool) -> Path:
    rng = np.random.default_rng(4)
    prompts = [caption(sample_scene(rng), rng) for _ in range(count)]
    path = tmp_path / "lab.txt"
    path.write_text("\n".join(prompts + prompts if repeat else prompts) + "\n", encoding="utf-8")
    return path


def test_queries_are_the_services_vectors_and_readings_keep_what_is_shown(tmp_path: Path) -> None:
    prompts = load_prompts(_trace(tmp_path, 12, repeat=False))
    lines = range(len(prompts))
    service = build_image_embedder(load_settings(open_clip_model=LAB_ATTRIBUTES))
    exact = lab_space_embeddings(prompts, lines, shown=1.0, dim=DIM)
    assert np.allclose(exact.vectors, service.embed_text(list(prompts.lines)))
    assert exact.keys is not None and np.allclose(exact.keys, exact.vectors)  # every attribute read as asked
    misread = lab_space_embeddings(prompts, lines, shown=0.0, dim=DIM)
    assert misread.keys is not None and np.allclose(np.einsum("ij,ij->i", misread.keys, misread.vectors), 0.0)
    drawn, again = (lab_space_embeddings(prompts, lines, shown=0.7, dim=DIM).keys for _ in range(2))
    assert drawn is not None and again is not None and np.array_equal(drawn, again)  # seeded per prompt


def test_a_prompt_outside_the_labs_world_gets_the_services_vector_and_matches_no_image(
    tmp_path: Path,
) -> None:
    """A real prompt lands where the service's attribute embedder puts it (the last coordinate), and the
    key drawn for its image serves no prompt, of the lab's world or outside it, at the lab table's floor."""
    lab = list(load_prompts(_trace(tmp_path, 40, repeat=False)).lines)
    outside = ["an astronaut riding a horse, trending on artstation", "a castle at dusk, oil painting"]
    prompts = load_prompts(_write(tmp_path, "\n".join(outside + lab)))
    service = build_image_embedder(load_settings(open_clip_model=LAB_ATTRIBUTES))
    embedded = lab_space_embeddings(prompts, range(len(prompts)), shown=0.7, dim=DIM)
    assert np.allclose(embedded.vectors, service.embed_text(list(prompts.lines)))
    assert embedded.keys is not None and embedded.describe["outside_world"] == len(outside)
    assert np.allclose(np.linalg.norm(embedded.keys, axis=1), 1.0)
    similarities = embedded.vectors @ embedded.keys[: len(outside)].T  # every query against their images
    floor = PRESETS["lab-t2i"].lowest_similarity
    assert float(similarities.max()) < floor
    assert np.allclose(embedded.vectors[: len(outside)] @ embedded.keys.T, 0.0)  # they match no image at all


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "other.txt"
    path.write_text(text + "\n", encoding="utf-8")
    return path


def test_a_reading_keeps_each_attribute_at_the_rate_shown() -> None:
    rng = np.random.default_rng(1)
    asked = parse(caption(sample_scene(rng), rng))
    assert asked is not None
    kept = [
        sum(value == asked[name] for name, value in simulated_reading(asked, 0.7, rng).items()) / len(asked)
        for _ in range(2000)
    ]
    assert abs(float(np.mean(kept)) - 0.7) < 0.02


def test_the_labs_default_is_simulated_as_image_lookups_with_its_own_profile(
    tmp_path: Path, bench_settings: Settings
) -> None:
    settings = bench_settings.model_copy(
        update={
            "lookup_mode": LookupMode.TEXT_TO_IMAGE,
            "hit_policy": HitPolicy.REFINE,
            "open_clip_model": LAB_ATTRIBUTES,
        }
    )
    prompts = load_prompts(_trace(tmp_path, 20, repeat=True))
    workload = build_workload(prompts, ArrivalSpec())
    embeddings = lab_space_embeddings(prompts, range(len(prompts)), shown=1.0, dim=DIM)
    profile = build_profile("configured", settings)
    result = run_simulation(
        workload,
        SimConfig(profile=profile, costs=StepCosts(), cache_bytes=10**12),
        settings=settings,
        embeddings=embeddings,
    )
    report = result.report
    by_seq = {o.seq: o for o in result.outcomes}
    repeats_of_misses = [  # a miss is cached once its image is made: the repeats that came after it
        by_seq[seq]
        for seq in range(20, 40)
        if not by_seq[seq - 20].hit and (by_seq[seq - 20].completed_s or 0) < by_seq[seq].arrival_s
    ]
    assert repeats_of_misses and all(o.hit and o.similarity == pytest.approx(1.0) for o in repeats_of_misses)
    assert all(
        o.k == 45 and o.similarity is not None and o.similarity > 0.85 for o in result.outcomes if o.hit
    )
    assert report.embedder["name"] == LAB_ATTRIBUTES and ">0.85:45" in str(report.embedder["k_table"])
    assert report.quality is not None and "image-refine-small.json" in str(report.quality.source)


def test_images_are_read_at_the_fresh_quality_of_the_profile_the_simulation_is_given(
    tmp_path: Path, bench_settings: Settings
) -> None:
    """`bench simulate --quality-profile` names another profile (another set of weights): its readings
    (or, in a profile without them, its large model's fresh quality), not the shipped profile's, are what
    the simulated readings follow."""
    from bench.quality.model import shipped_profile
    from bench.sim.stack_lookup import stack_embeddings

    settings = bench_settings.model_copy(
        update={"lookup_mode": LookupMode.TEXT_TO_IMAGE, "open_clip_model": LAB_ATTRIBUTES}
    )
    workload = build_workload(load_prompts(_trace(tmp_path, 6, repeat=False)), ArrivalSpec())
    profiles = [build_profile("configured", settings)]
    shipped = shipped_profile(HitPolicy.REFINE, True, LookupMode.TEXT_TO_IMAGE)
    other = tmp_path / "other-weights.json"
    without_readings = {k: v for k, v in json.loads(shipped.read_text()).items() if k != "readings"}
    other.write_text(json.dumps(without_readings | {"fresh_quality": 0.9}))
    described = stack_embeddings(settings, workload, profiles, other).describe
    assert described["shown"] == 0.9 and "one-hot" in str(described["lookup"])
    by_default = stack_embeddings(settings, workload, profiles, None).describe
    shipped_data = json.loads(shipped.read_text())
    assert by_default["shown"] != 0.9 and by_default["shown"] == shipped_data["fresh_quality"]
    # The shipped profile keeps the readings of its cached images: the simulation draws from them.
    assert f"{len(shipped_data['readings'])} measured readings" in str(by_default["lookup"])


def _soft_reading(asked: dict[str, str], rng: np.random.Generator) -> np.ndarray:
    """A judge-like reading: every asked value most probable but not certain, one attribute misread."""
    from lab.attribute_space import attribute_vector
    from lab.world import ATTRIBUTES

    misread = dict(asked)
    name = sorted(asked)[int(rng.integers(len(asked)))]
    misread[name] = next(value for value in ATTRIBUTES[name] if value != asked[name])
    vector = 0.7 * attribute_vector(asked, DIM) + 0.3 * attribute_vector(misread, DIM)
    return np.asarray(vector / np.linalg.norm(vector), dtype=np.float32)


def test_measured_readings_keep_their_similarity_when_moved_onto_another_prompt(tmp_path: Path) -> None:
    """A profile's reading of one prompt's image, drawn for another prompt of the same attributes, sits
    as far from that prompt as it sat from its own: the judge's confidence and misreads are kept."""
    rng = np.random.default_rng(3)
    scenes = [caption(sample_scene(rng), rng) for _ in range(60)]
    by_shape: dict[tuple[str, ...], list[str]] = {}
    for text in scenes:
        asked = parse(text)
        assert asked is not None
        by_shape.setdefault(tuple(sorted(asked)), []).append(text)
    shapes = sorted(by_shape, key=len)
    assert len(shapes) == 2  # one object, two objects
    source = by_shape[shapes[0]][0]
    source_asked = parse(source)
    assert source_asked is not None
    vector = _soft_reading(source_asked, rng)
    from lab.attribute_space import attribute_vector

    own = float(attribute_vector(source_asked, DIM) @ vector)
    readings = profiled_readings([reading_record(source, vector)])
    assert len(readings) == 1 and readings[0].asked == source_asked
    alike, other = by_shape[shapes[0]][1:6], by_shape[shapes[1]][:5]
    path = _write(tmp_path, "\n".join(alike + other))
    embedded = lab_space_embeddings(load_prompts(path), range(10), shown=1.0, dim=DIM, readings=readings)
    assert embedded.keys is not None
    similarity = np.einsum("ij,ij->i", embedded.vectors, embedded.keys)
    assert own < 0.99 and np.allclose(similarity[:5], own, atol=1e-3)
    assert np.allclose(similarity[5:], 1.0)  # no reading of two objects: one-hot, every attribute as asked
    assert "1 measured readings" in str(embedded.describe["lookup"])
