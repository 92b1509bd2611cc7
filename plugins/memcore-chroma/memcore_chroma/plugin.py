"""The memcore plugin entry point: registers the Chroma stores and their benchmark baseline."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from memcore import hookimpl
from memcore.store import BaseStore
from memcore_chroma.deployments import ChromaHttpStore, ChromaMemoryStore, ChromaStore
from memcore_chroma.opening import DEFAULT_COLLECTION

if TYPE_CHECKING:
    from memcore_chroma.raw_baseline import RawChroma


@hookimpl
def memcore_register_stores(register: Callable[[type[BaseStore]], None]) -> None:
    """Register ``chroma://``, ``chroma+memory://`` and ``chroma+http(s)://``."""
    register(ChromaStore)
    register(ChromaMemoryStore)
    register(ChromaHttpStore)


@hookimpl
def memcore_bench_raw_client(url: str) -> RawChroma | None:
    """Raw chromadb on a folder, for the embedded form ``chroma://PATH`` only."""
    if not url.startswith("chroma://"):
        return None
    from memcore_chroma.opening import check_ef_search
    from memcore_chroma.raw_baseline import RawChroma
    from memcore_chroma.urls import ef_search_param, embedded_path

    location, params = embedded_path(url)
    return RawChroma(Path(location), check_ef_search(ef_search_param(params)))


@hookimpl
def memcore_bench_discard(url: str, name: str) -> bool | None:
    """Drop the collection ``name`` a bench run made on a Chroma server (``chroma+http://...?collection=name``);
    any other collection is left alone."""
    if not url.startswith(("chroma+http://", "chroma+https://")):
        return None
    from chromadb.errors import NotFoundError

    from memcore_chroma import connection, urls
    from memcore_chroma.errors import translated

    address, parsed = urls.server_address(url)
    if parsed.params.get("collection", DEFAULT_COLLECTION) != name:
        return False
    server = connection.http(address.host, address.port, address.ssl, address.tenant, address.database)
    try:
        with (
            translated(f"dropping the collection {name!r}"),
            server.reading(),
            contextlib.suppress(NotFoundError),
        ):
            server.client.delete_collection(name)
    finally:
        server.release()
    return True
