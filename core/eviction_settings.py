"""The settings of eviction passes at scale (issue 17), a part of core.settings.Settings, read from the
same REPRISE_* environment variables. The pass (db/eviction.py) and the simulator (bench/simcache.py)
both read them."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class EvictionSettings(BaseSettings):
    """REPRISE_EVICTION_SAMPLE_FACTOR and REPRISE_EVICTION_EXACT_ENTRIES."""

    eviction_sample_factor: int = Field(
        5,
        ge=0,
        description="LCBFU and LRBU score against the clock, so no index orders them: a pass on a large "
        "scope ranks a random sample holding this many times the bytes to free, and evicts its lowest "
        "(Redis' approximated LRU: maxmemory-samples 5 keys sampled per key evicted, redis.conf and "
        "https://redis.io/docs/latest/develop/reference/eviction/). 0: rank the whole scope, exactly.",
    )
    eviction_exact_entries: int = Field(
        1000,
        ge=0,
        description="Scopes with fewer live entries than this are ranked whole, exactly, under every "
        "policy: about 6,000 units at NIRVANA's 5 states per entry, a ~25 ms ranking (issue 17).",
    )
