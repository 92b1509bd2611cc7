"""The memcore plugin: registers the PostgreSQL store for ``postgresql://`` and ``postgres://``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memcore import hookimpl
from memcore.store import BaseStore

if TYPE_CHECKING:
    from memcore_pgvector.raw_baseline import RawPsycopg


@hookimpl
def memcore_register_stores(register: Callable[[type[BaseStore]], None]) -> None:
    """Register :class:`~memcore_pgvector.store.PgvectorStore`."""
    from memcore_pgvector.store import PgvectorStore

    register(PgvectorStore)


@hookimpl
def memcore_bench_raw_client(url: str) -> RawPsycopg | None:
    """Raw psycopg on the same server, in a table of its own (``<table>_raw``)."""
    if not url.startswith(("postgresql://", "postgres://")):
        return None
    from memcore_pgvector.raw_baseline import RawPsycopg
    from memcore_pgvector.store import connection_target

    conninfo, table = connection_target(url)
    return RawPsycopg(conninfo, table)


@hookimpl
def memcore_bench_discard(url: str, name: str) -> bool | None:
    """Drop the records table ``name`` (and its meta table) a bench run made at
    ``postgresql://...?collection=name``; any other table is left alone."""
    if not url.startswith(("postgresql://", "postgres://")):
        return None
    import psycopg

    from memcore_pgvector.connections import CONNECT_SECONDS
    from memcore_pgvector.errors import translated
    from memcore_pgvector.schema import Tables
    from memcore_pgvector.store import connection_target, redacted

    conninfo, table = connection_target(url)
    if table != name:
        return False
    with (
        translated(f"dropping the table {table}", redacted(conninfo)),
        psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_SECONDS) as connection,
    ):
        Tables(table).drop(connection)
    return True
