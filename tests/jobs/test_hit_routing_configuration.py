"""Start-up refusal of a configuration that can never serve its hits: under NIRVANA's
resume, a small model of another latent family cannot resume the large model's latents, so large
workers must take hits."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core.errors import SettingsError
from core.settings import load_settings
from core.vocabulary import HitPolicy
from jobs.configuration import check_configuration


def test_resume_across_families_with_large_workers_off_hits_is_refused_naming_the_variables() -> None:
    settings = load_settings(
        small_family="other-family", large_serves_hits=False, hit_policy=HitPolicy.RESUME
    )
    with pytest.raises(SettingsError) as refused:
        check_configuration(settings)
    message = str(refused.value)
    for variable in (
        "REPRISE_HIT_POLICY=resume",
        "REPRISE_SMALL_FAMILY='other-family'",
        "REPRISE_LARGE_SERVES_HITS=false",
    ):
        assert variable in message
    assert "Fix: set REPRISE_LARGE_SERVES_HITS=true" in message


@pytest.mark.parametrize(
    "overrides",
    [
        {"small_family": "other-family"},  # hits run on the large pool (cache_hit_large)
        {"large_serves_hits": False},  # same family: the small pool resumes them
        {"small_family": "other-family", "large_serves_hits": False, "hit_policy": HitPolicy.REFINE},
    ],
)
def test_configurations_that_can_serve_their_hits_start(overrides: dict[str, object]) -> None:
    assert not any("REPRISE_LARGE_SERVES_HITS" in w for w in check_configuration(load_settings(**overrides)))


def test_small_workers_kept_for_hits_they_cannot_serve_are_a_warning() -> None:
    settings = load_settings(small_family="other-family", monitor_min_small=1, hit_policy=HitPolicy.RESUME)
    assert any("REPRISE_MONITOR_MIN_SMALL=1" in warning for warning in check_configuration(settings))


def test_the_cli_refuses_it_at_start() -> None:
    env = {
        **os.environ,
        "REPRISE_SMALL_FAMILY": "other-family",
        "REPRISE_LARGE_SERVES_HITS": "false",
        "REPRISE_HIT_POLICY": "resume",
    }
    done = subprocess.run(
        [sys.executable, "-m", "reprise", "keys", "--help"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "REPRISE_LARGE_SERVES_HITS=false" in done.stderr
