"""The simulator's GPU pools: workers switch model towards the targets, busy ones when their job ends."""

from __future__ import annotations

import pytest

from bench.sim.pools import Pools, PoolTargets


def test_pools_switch_idle_workers_towards_the_targets() -> None:
    pools = Pools(PoolTargets(large=3, small=1), switch_s=5.0)
    pools.workers[0].jobs[7] = 100.0  # busy: it switches only once its job ends
    pools.set_targets(PoolTargets(large=1, small=3))
    switched = pools.rebalance(now_s=10.0)
    assert [w.worker_id for w in switched] == [1, 2]
    assert all(w.available_s == 15.0 and not w.idle(12.0) for w in switched)
    assert (pools.hosting(pools.workers[1].role), pools.switches) == (3, 2)
    with pytest.raises(ValueError, match="must keep 4 workers"):
        pools.set_targets(PoolTargets(large=4, small=1))
