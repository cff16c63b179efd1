"""network: a slow, lossy network between the workers and their services. The bench's fault proxy
(bench.chaos.proxy) sits between every worker and Redis and Postgres; for `outage_s` it adds latency
and cuts connections (drops and resets), then passes bytes untouched again. Nothing may be lost or done
twice, and no worker may exit: a worker that dies of a socket error is a fault of its own, so the
scenario reports each worker whose pid changed (the supervisor restarted it).

On the bench's own stack the proxy is there from the start (`reprise run --workers-redis-url
--workers-database-url`, pointed at its ports). Against a running stack (--base-url) an operator starts
the stack's workers pointed at ports the bench's proxy will listen on (--proxy-ports REDIS,POSTGRES) and
passes them to the bench; without them the scenario cannot run and says so."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict

from bench.chaos.run import Run


def network(run: Run) -> float:
    proxy = run.target.proxy
    if proxy is None:
        raise RuntimeError(
            "the network scenario needs the workers behind the bench's fault proxy: on a running stack, "
            "start its workers with REPRISE_REDIS_URL and REPRISE_DATABASE_URL on the ports given to "
            "--proxy-ports (reprise run --workers-redis-url ... --workers-database-url ...)"
        )
    before = Counter(proxy.counts.by_kind)
    proxy.start_fault(run.options.network)
    time.sleep(run.outage_s)
    proxy.end_fault()
    cut = Counter(proxy.counts.by_kind)
    cut.subtract(before)
    run.extra["proxy"] = {kind: count for kind, count in sorted(cut.items()) if count}
    run.extra["fault"] = asdict(run.options.network)
    return time.time()
