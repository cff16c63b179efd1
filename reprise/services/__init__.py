"""The servers Reprise needs (Postgres + pgvector, Redis): external when configured, else embedded."""
