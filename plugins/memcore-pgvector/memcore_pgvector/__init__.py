"""memcore-pgvector: memcore records in PostgreSQL, searched by pgvector (``postgresql://``)."""

from memcore_pgvector.store import PgvectorStore

__all__ = ["PgvectorStore"]
