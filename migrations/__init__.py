"""Alembic migrations (stand on core and db). The first creates the vector extension and the HNSW
indexes. Run by reprise/migrate.py (`reprise migrate`), the roof, since db/ may not import them."""
