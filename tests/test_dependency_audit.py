"""The dependency audit, offline: every version pinned in requirements.lock against the vendored PyPA
advisory snapshot (tests/data/advisories/); a finding fails unless waived with its reason. The live
check is `pip-audit -r requirements.lock` (docs/development.md)."""

from __future__ import annotations

from tests.support.advisories import LOCK, Advisory, findings, load_snapshot, load_waivers, locked_versions


def test_no_locked_version_has_an_unwaived_advisory() -> None:
    _, advisories = load_snapshot()
    waivers = load_waivers()
    found = findings(locked_versions(LOCK.read_text()), advisories)
    unwaived = [str(finding) for finding in found if finding.advisory.id not in waivers]
    assert unwaived == [], "upgrade the package in requirements.lock, or waive it in waivers.toml with why"


def test_every_waiver_has_a_reason_and_still_matches_a_finding() -> None:
    _, advisories = load_snapshot()
    found = {finding.advisory.id for finding in findings(locked_versions(LOCK.read_text()), advisories)}
    for advisory_id, reason in load_waivers().items():
        assert len(reason.strip()) >= 20, f"{advisory_id}: say why it does not apply"
        assert advisory_id in found, f"{advisory_id} no longer affects a locked version: remove its waiver"


def test_the_snapshot_covers_the_lock_and_names_its_source() -> None:
    source, advisories = load_snapshot()
    assert source["repository"] == "https://github.com/pypa/advisory-database"
    assert len(source["commit"]) == 40 and source["date"] and source["license"] == "CC-BY-4.0"
    pins = locked_versions(LOCK.read_text())
    assert len(pins) > 100 and pins["fastapi"] and pins["pillow"]
    assert {advisory.package for advisory in advisories} <= set(pins)
    assert {"pillow", "urllib3", "jinja2", "starlette", "fastapi"} <= {a.package for a in advisories}


def test_the_matcher_finds_what_the_advisories_say() -> None:
    # Real advisories of the snapshot, against versions they name, so that the audit cannot pass vacuously.
    _, advisories = load_snapshot()
    by_id = {advisory.id: advisory for advisory in advisories}
    starlette = by_id["PYSEC-2023-83"]  # introduced 0.13.5, fixed 0.27.0
    assert starlette.affects("0.26.1") and starlette.affects("0.13.5")
    assert not starlette.affects("0.13.4") and not starlette.affects("0.27.0")
    urllib3 = by_id["PYSEC-2023-192"]  # two branches: < 1.26.17, and 2.0.0 up to 2.0.6
    assert urllib3.affects("1.26.16") and urllib3.affects("2.0.5")
    assert not urllib3.affects("1.26.17") and not urllib3.affects("2.0.6") and not urllib3.affects("2.8.0")
    found = findings({"starlette": "0.26.1", "requests": "2.34.2"}, advisories)
    assert "PYSEC-2023-83" in {finding.advisory.id for finding in found}
    assert all(finding.advisory.package == "starlette" for finding in found)


def test_last_affected_bounds_and_listed_versions() -> None:
    bounded = Advisory("X-1", "p", (), "", (({"introduced": "1.0"}, {"last_affected": "1.4"}),), ())
    assert bounded.affects("1.4") and not bounded.affects("1.4.1") and not bounded.affects("0.9")
    listed = Advisory("X-2", "p", (), "", (), ("2.0", "2.1"))
    assert listed.affects("2.1") and not listed.affects("2.2")


def test_the_lock_parser_reads_pins_extras_and_markers() -> None:
    text = "# header\nPyYAML==6.0.3\nuvicorn[standard]==0.30 ; python_version >= '3.11'\n-e .\nfoo>=1\n"
    assert locked_versions(text) == {"pyyaml": "6.0.3", "uvicorn": "0.30"}
