"""Cache: what is cached, the byte budget of each cache scope, the eviction policy that keeps it
(NIRVANA 5.4's LCBFU by default) and how long outputs are retained."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from core.vocabulary import EvictionPolicyName


class CacheSettings(BaseSettings):
    """Cache: budget, eviction and retention.

    Beat's eviction pass (jobs/passes/eviction.py) and the simulator (`reprise bench simulate`) both
    read these; the retention pass deletes old outputs.
    """

    cache_all: bool = Field(False, description="Also cache results of hits (MoDM 5.4 caches both models).")
    cache_budget_bytes: int = Field(
        1 << 30,
        ge=0,
        description="Byte budget per cache scope. NIRVANA 5.4 holds 300k prompts in 1 TB; 1 GiB per "
        "tenant is a starting point to size with `reprise bench simulate --sweep`.",
    )
    eviction_policy: EvictionPolicyName = Field(EvictionPolicyName.LCBFU, description="NIRVANA 5.4 default.")
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
        "policy: about 6,000 units at NIRVANA's 5 states per entry, a ranking measured at about 25 ms.",
    )
    retention_days: float | None = Field(
        None,
        gt=0,
        description="Outputs (latents, images, and the cache entry made from them) of jobs finished longer "
        "ago than this are deleted by the retention pass; their image reads answer 410. Unset: kept.",
    )
