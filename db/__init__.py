"""What the service remembers: engine and sessions, models, pgvector queries, blobs, the latent codec."""
