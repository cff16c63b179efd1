"""redis-empty: the broker lost with its data. Redis is SIGKILLed, its append-only files and any dump are
deleted, and after the outage `reprise services up` starts it empty: every queued and reserved message,
kombu's bindings and unacked set, the beat lock and the decode ring's heartbeats are gone. Postgres still
records every accepted job; the reconciler must send each again (a waiting job that no message names,
a running one whose lease lapses)."""

from __future__ import annotations

import time

from bench.chaos.run import Run


def redis_empty(run: Run) -> float:
    run.target.kill("redis")
    time.sleep(0.5)  # the killed server's files are closed before they go
    run.extra["deleted"] = run.target.wipe_redis()
    time.sleep(max(0.0, run.outage_s - 0.5))
    run.target.restart_services()
    return time.time()
