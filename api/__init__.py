"""The HTTP floor: routes, schemas, auth, problem+json errors, /metrics. Stands on core, db and jobs
(it enqueues through jobs.dispatch); never imports workers/, torch, diffusers or open_clip
(tests/test_floors.py checks both)."""
