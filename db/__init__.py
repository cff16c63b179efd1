"""What the service remembers, and all of its SQL: engine and sessions, models, the cache index
(pgvector), jobs and their runs, statistics, pool records, webhook deliveries, predictor fits, the blob
stores and the latent codec. Stands on core only; functions take the caller's session."""
