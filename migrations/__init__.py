"""Alembic migrations. The first creates the vector extension and the HNSW indexes."""
