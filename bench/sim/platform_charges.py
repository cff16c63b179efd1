"""Which replay's platform costs each simulated profile is charged, and what the report says of it.

With a replay's measured stages (--platform-costs REPLAY.json, else the --compare replay's where it has
them) each job is charged its route's platform cost (bench.sim.platform), scaled on a vanilla run of the
workload; without them none is, and the report says so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from bench.live.stack import read_comparison
from bench.run.options import SimulateOptions
from bench.run.profiles import Profile, build_profile
from bench.sim.config import ConfigFor, SimConfig
from bench.sim.platform import (
    NOT_MODELLED,
    PlatformCharge,
    PlatformCosts,
    load_platform_costs,
    platform_costs,
)
from bench.sim.simulate import run_simulation
from bench.workload.trace import Workload
from core.settings import Settings


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


Measured = dict[str, tuple[PlatformCosts | None, str]]
"""Per profile: the replay's platform costs (None: none measured) and where they were looked for."""


def measured_costs(options: SimulateOptions, profiles: Sequence[Profile]) -> Measured:
    """Each profile's measured platform costs: --platform-costs' replay (which must have stages), else
    the --compare replay's where it has them."""
    found: Measured = {}
    if options.platform_costs is not None:
        if options.rates:
            raise ValueError(
                "--platform-costs scales the replay's costs on one workload's vanilla run: drop --rates"
            )
        for profile in profiles:
            costs = load_platform_costs(options.platform_costs, profile.name, host=options.platform_host)
            if costs is None:
                raise ValueError(
                    f"--platform-costs {options.platform_costs}: its report has no `stages` (a replay "
                    "from before the stages were recorded): nothing to charge"
                )
            found[profile.name] = (costs, str(options.platform_costs))
        return found
    if options.compare is None:
        return {p.name: (None, "no replay given (--compare or --platform-costs)") for p in profiles}
    measured = read_comparison(options.compare)
    for profile in profiles:
        match = next((m for m in measured if m.get("profile") == profile.name), None)
        source = f"{options.compare} ({profile.name})"
        costs = platform_costs(match, host=options.platform_host, source=source) if match else None
        found[profile.name] = (costs, source if costs is not None else f"{source} has no `stages`")
    return found


def platform_charges(
    settings: Settings, config: ConfigFor, workload: Workload, measured: Measured
) -> dict[str, PlatformCharge]:
    """Each profile's per-job charges in the simulation's milliseconds, scaled on a vanilla run of the
    workload without platform work (bench.sim.platform: its device time per job)."""
    if not any(costs is not None for costs, _ in measured.values()):
        return {}
    vanilla = run_simulation(
        workload, config(build_profile("vanilla", settings), 0), settings=settings, embeddings=None
    )
    device_ms = vanilla.device_ms_per_job
    if not device_ms:
        raise ValueError("the vanilla simulation ran no job: no device time to scale the platform costs by")
    charges = {name: costs.charge(device_ms) for name, (costs, _) in measured.items() if costs is not None}
    for name, charge in charges.items():
        _note(
            f"platform ({name}): a hit {charge.hit_ms:.1f} ms, a miss {charge.miss_ms:.1f} ms, a vanilla "
            f"job {charge.vanilla_ms:.1f} ms on its worker beside its steps (replay's x {charge.scale:.3f})"
        )
    return charges


def charged(config: ConfigFor, charges: Mapping[str, PlatformCharge]) -> ConfigFor:
    """The factory, each profile's runs (and the vanilla runs beside them) charged its costs. A vanilla
    run beside several profiles is charged the first's vanilla costs."""
    if not charges:
        return config
    first = next(iter(charges.values()))

    def charged(profile: Profile, cache_bytes: int) -> SimConfig:
        return replace(config(profile, cache_bytes), platform=charges.get(profile.name, first))

    return charged


def platform_record(name: str, charges: Mapping[str, PlatformCharge], measured: Measured) -> dict[str, Any]:
    """What the JSON says of a run's platform cost: the charges and their source, or why none."""
    if name in charges:
        return charges[name].as_json()
    if charges and name == "vanilla":
        return next(iter(charges.values())).as_json()
    return {**NOT_MODELLED, "why": measured.get(name, (None, "no replay given"))[1]}


def platform_text(name: str, charges: Mapping[str, PlatformCharge], measured: Measured) -> str:
    record = platform_record(name, charges, measured)
    if not record["modelled"]:
        return f"NOT MODELLED ({record['why']}): each job costs its priced steps only"
    charged = record["charged_ms"]
    return (
        f"hit {charged['hit']:.1f} ms, miss {charged['miss']:.1f} ms, vanilla {charged['vanilla']:.1f} ms "
        f"a job beside its steps ({record['host']} host, from {record['source']}, "
        f"scaled on {record['scaled_on']})"
    )
