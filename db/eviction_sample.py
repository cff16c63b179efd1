"""Random samples of a cache scope for eviction passes (db/eviction.py): LCBFU and LRBU score against
the clock, which no index orders, so a pass on a large scope ranks a random sample of it (Redis'
approximated LRU). A sample is a range of `sample_key`, uniform and fixed at insert, read from two
covering indexes (migration 0012): the entries of the range, and every state of theirs.
"""

from __future__ import annotations

import math
import random
import uuid
from collections import defaultdict
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from core.usage import EntryUsage, StateUsage

# A sample is a range of sample_key, read from two covering indexes (migration 0012): the live entries
# in the range (in key order, up to n) and every state in it up to the last entry's key (a state
# carries its entry's key). Neither statement visits the tables' rows.
_SAMPLE_ENTRIES = """
SELECT e.sample_key, e.id, e.bytes, e.created_at
FROM cache_entries e
WHERE e.scope = %(scope)s AND e.state = 'live' AND e.sample_key >= %(lo)s AND e.sample_key < %(hi)s
ORDER BY e.sample_key
LIMIT %(n)s
"""

_SAMPLE_STATES = """
SELECT s.sample_key, s.k, s.bytes, s.access_count, s.created_at, s.last_access_at
FROM cache_states s
WHERE s.scope = %(scope)s AND s.sample_key >= %(lo)s AND s.sample_key <= %(last)s
"""

_ENTRY_COUNTERS = "SELECT id, access_count, last_access_at FROM cache_entries WHERE id = ANY(:ids)"

SAMPLE_PROBE = 32
"""Entries of a sample's first read, which measures the bytes per entry that size the next reads."""


def sample_usage(
    session: Session, scope: str, target_bytes: int, rng: random.Random
) -> tuple[list[EntryUsage], int]:
    """Live entries from a random point of `sample_key` on (wrapping around) until they hold
    `target_bytes`, with their usage: a uniformly random sample, since the key is random and fixed at
    insert. Also the rows read."""
    start = rng.random()
    usage: list[EntryUsage] = []
    held, size, rows = 0, SAMPLE_PROBE, 0
    for lo, hi in ((start, 1.0), (0.0, start)):
        while held < target_bytes:
            chunk, last, read = _sample_chunk(session, scope, lo, hi, size)
            usage.extend(chunk)
            held += sum(entry.total_bytes for entry in chunk)
            rows += read
            if last is None or len(chunk) < size:
                break
            lo = math.nextafter(last, math.inf)
            per_entry = max(held // len(usage), 1)
            size = max(SAMPLE_PROBE, math.ceil(1.2 * (target_bytes - held) / per_entry))
    return usage, rows


def _binary_rows(session: Session, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of a psycopg-style query (`%(name)s`) on the session's connection, in its transaction,
    in Postgres' binary format: uuids and timestamps load ~4x faster than as text (a sample's 32,000
    states: 46 ms against 188 ms)."""
    driver = session.connection().connection.driver_connection
    if driver is None:
        raise RuntimeError("the session's connection has no driver connection")
    with driver.cursor(binary=True) as cursor:
        cursor.execute(query, params)
        return list(cursor.fetchall())


def _sample_chunk(
    session: Session, scope: str, lo: float, hi: float, n: int
) -> tuple[list[EntryUsage], float | None, int]:
    """Up to n live entries with sample_key in [lo, hi), each with all its states; the last entry's key
    (None: none found) and the rows read. An entry's own counters are read only when it has no states
    left: the planner scores an entry itself only then (jobs.policies.eviction.plan_eviction); the
    others carry their creation as their last access and no uses."""
    entries = _binary_rows(session, _SAMPLE_ENTRIES, {"scope": scope, "lo": lo, "hi": hi, "n": n})
    if not entries:
        return [], None, 0
    last = float(entries[-1][0])
    # A state names its entry by the entry's sample_key (its own copy; unique but for a 2^-53 chance):
    # no uuid to build per state. States of entries not in `entries` (not live) are left out.
    by_key = {key: entry_id for key, entry_id, _, _ in entries}
    states: dict[uuid.UUID, list[StateUsage]] = defaultdict(list)
    found = _binary_rows(session, _SAMPLE_STATES, {"scope": scope, "lo": lo, "last": last})
    for key, *usage in found:
        owner = by_key.get(key)
        if owner is not None:
            states[owner].append(StateUsage(owner, *usage))
    bare = [entry_id for _, entry_id, _, _ in entries if entry_id not in states]
    counters = (
        {
            entry_id: (count, last_access)
            for entry_id, count, last_access in session.execute(text(_ENTRY_COUNTERS), {"ids": bare})
        }
        if bare
        else {}
    )
    usage = []
    for _, entry_id, size, created in entries:
        count, last_access = counters.get(entry_id, (0, created))
        usage.append(EntryUsage(entry_id, size, count, created, last_access, tuple(states.get(entry_id, ()))))
    return usage, last, len(entries) + len(found) + len(counters)
