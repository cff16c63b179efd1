"""Passes: the periodic work that combines SQL (db/), blobs and a pure policy (jobs/policies/).

- eviction.py: keep each cache scope within its byte budget (the policy ranks, db/ applies, blobs go).
- retrain.py: refit the match predictor of each scope whose cache changed enough.
- reconcile.py: re-enqueue work whose message the broker lost, from Postgres, the truth.
- quality_guard.py: move the k table's thresholds to hold the audited quality drop to its target.

Beat schedules them (jobs/schedule.py); an io worker runs them (workers/tasks.py). A pass is safe to run
concurrently with the request path and with itself.
"""
