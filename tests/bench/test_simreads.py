"""The read-side simulator (bench.simreads): the contract, and each mechanism doing what the paper says."""

from __future__ import annotations

from bench.simreads import ReadSimSpec, burst_decodes, simulate_reads

SMALL = ReadSimSpec(objects=3000, reads=30_000, window=300, seed=1)


def test_the_report_keeps_the_contract_and_the_baselines_behave() -> None:
    report = simulate_reads(SMALL)
    setups = report["setups"]
    assert set(setups) == {"images_only", "latents_only", "fixed", "adaptive"}
    for figures in setups.values():
        contract = {"stored_bytes_ratio", "decodes_per_read", "image_tier_hit", "latent_tier_hit", "read_ms"}
        assert contract <= figures.keys()
        assert figures["read_ms"]["p50"] <= figures["read_ms"]["p99"]
    images, latents = setups["images_only"], setups["latents_only"]
    assert images["stored_bytes_ratio"] == 1.0 and images["decodes_per_read"] == 0.0
    assert 0.15 < latents["stored_bytes_ratio"] < 0.25  # Table 5: 0.29 MB against 1.5 MB
    assert latents["image_tier_hit"] == 0.0
    # every read decodes but those that joined a decode in flight
    assert latents["decodes_per_read"] == round(1 - latents["coalesced"] / latents["reads"], 4)
    assert setups["adaptive"]["decodes_per_read"] < 0.7 * latents["decodes_per_read"]
    assert report["burst"] == {"reads": 100, "decodes": 1, "coalesced": 99}


def test_a_costly_decode_moves_alpha_toward_images() -> None:
    slow = ReadSimSpec(
        objects=3000, reads=30_000, window=100, t_decode_s=0.5, t_fetch_s=0.01, rate=5.0, seed=1
    )
    alphas = simulate_reads(slow, setups=("adaptive",))["setups"]["adaptive"]["alpha_final"]
    assert min(alphas) > 0.5


def test_spillover_cuts_the_tail_of_a_loaded_node() -> None:
    loaded = ReadSimSpec(objects=3000, reads=30_000, rate=70.0, seed=1)
    with_spill = simulate_reads(loaded, setups=("latents_only",))["setups"]["latents_only"]
    unspilled = ReadSimSpec(objects=3000, reads=30_000, rate=70.0, seed=1, theta=float("inf"))
    hash_only = simulate_reads(unspilled, setups=("latents_only",))["setups"]["latents_only"]
    assert with_spill["spilled"] > 0 and hash_only["spilled"] == 0
    assert with_spill["read_ms"]["p99"] < hash_only["read_ms"]["p99"]


def test_a_burst_on_an_object_in_flight_costs_one_decode() -> None:
    assert burst_decodes(SMALL)["decodes"] == 1
