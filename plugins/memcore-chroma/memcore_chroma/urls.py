"""The URLs of the Chroma stores, on :class:`memcore.urls.StoreURL`.

========================================  ==========================================
``chroma:///abs/path``, ``chroma://rel``  embedded, durable (``PersistentClient``)
``chroma+memory://``                      in memory, private to the store (``EphemeralClient``)
``chroma+http://host:port``               a Chroma server (``HttpClient``); ``chroma+https://``
========================================  ==========================================

Query parameters: ``collection`` (default ``memcore``), ``dimension`` and
``ef_search`` for the embedded and server forms, plus ``tenant``, ``database`` and
``exclusive`` for a server.
"""

from __future__ import annotations

from dataclasses import dataclass

from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT

from memcore.urls import COLLECTION, DIMENSION, StoreURL

DEFAULT_PORT = 8000
EF_SEARCH = "ef_search"
EMBEDDED_PARAMS = frozenset({COLLECTION, DIMENSION, EF_SEARCH})
SERVER_PARAMS = EMBEDDED_PARAMS | {"tenant", "database", "exclusive"}


@dataclass(frozen=True)
class ServerAddress:
    """Where a Chroma server is, and which tenant and database to use."""

    host: str
    port: int
    ssl: bool
    tenant: str = DEFAULT_TENANT
    database: str = DEFAULT_DATABASE


def dimension_param(url: StoreURL) -> int | None:
    """The ``dimension`` parameter, if given (a positive integer)."""
    return url.positive_int(DIMENSION)


def ef_search_param(url: StoreURL) -> int | None:
    """The ``ef_search`` parameter (HNSW candidates a search explores), if given; the store checks
    its range."""
    return url.positive_int(EF_SEARCH)


def embedded_path(url: str) -> tuple[str, StoreURL]:
    """The folder of ``chroma:///abs/path`` or ``chroma://rel/path``, and the parsed URL."""
    parsed = StoreURL.parse(url, params=EMBEDDED_PARAMS)
    return parsed.location(), parsed


def server_address(url: str | StoreURL) -> tuple[ServerAddress, StoreURL]:
    """The server of ``chroma+http(s)://host[:port][/]``, and the parsed URL."""
    parsed = url if isinstance(url, StoreURL) else StoreURL.parse(url, params=SERVER_PARAMS)
    ssl = parsed.scheme == "chroma+https"
    host, port = parsed.server(
        443 if ssl else DEFAULT_PORT, secret_hint="give the server's token to chromadb"
    )
    address = ServerAddress(
        host=host.strip("[]"),
        port=port,
        ssl=ssl,
        tenant=parsed.text_param("tenant", DEFAULT_TENANT),
        database=parsed.text_param("database", DEFAULT_DATABASE),
    )
    return address, parsed
